package xdp_drop

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// MaxPrefixFileSize bounds a prefix file: the largest public lists
// (FireHOL level 3, a country's ranges) are a few MiB.
const MaxPrefixFileSize = 64 << 20

// maxPrefixLine bounds a line of a prefix file: a longer one is no prefix
// list's, and reading stops there.
const maxPrefixLine = 4096

// Bounds on the number of prefix files: of one option of a rule, and of
// all the rules of an instance. With the prefixes every file together may
// list (listedPrefixes), they bound what reading the lists holds.
const (
	MaxPrefixFilesPerOption = 64
	MaxPrefixFiles          = 256
)

// Keys of the prefix file options of a rule, as errors name them.
const (
	keySrcPrefixFile = "src_prefix_file"
	keyDstPrefixFile = "dst_prefix_file"
)

// prefixLists owns the rules fed from prefix files: their files, the
// stamps and contents last read, the versions of each rule's prefixes and
// their generation, and the memory bound while a changed set is read.
// Load reads them for Init, Refresh reads what changed at each gather and
// gives the plugin the policy to put in force, and Fields are the prefix
// file fields of a rule's points; the plugin keeps the policy.
type prefixLists struct {
	rules []*fileRule // by rule, nil for a rule without files
	// gen numbers the rule prefixes in force (the plugin's policy); an interface whose
	// program holds another set is swapped to it. staleRules is never one.
	gen        uint64
	trustCheck bool // read the files under the trust check for trustUID
	trustUID   int
	// memoryBound holds the memory limit to restore while a changed set
	// is read and swapped in under a tighter one (see boundMemory).
	memoryBound  bool
	memoryBefore int64
	log          telegraf.Logger // what Load was given
}

const staleRules = 0

// fileRule is a rule fed from prefix files.
type fileRule struct {
	index    int
	name     string
	src, dst []netip.Prefix // src_prefix and dst_prefix
	files    []*prefixFile
	// sets are the versions of the rule's prefixes that programs may hold,
	// oldest first; the last is the policy's. A program whose swap failed
	// holds an older one, and its points report that one.
	sets []ruleSet
}

// ruleSet is one version of a rule's prefixes, counted: what a program
// holding it enforces.
type ruleSet struct {
	gen            uint64 // the generation (prefixLists.gen) it came in with
	prefixes       int    // distinct prefixes
	added, removed int    // by the change that made it; 0 for the first
	// loaded is when every file last loaded good while this was the
	// policy's set: a later set freezes it.
	loaded time.Time
	files  []string // the files whose change made it
	logged bool     // its change was logged as in force everywhere
}

// cur is the rule's set in the policy.
func (fr *fileRule) cur() *ruleSet { return &fr.sets[len(fr.sets)-1] }

// heldAt is the index in sets of the rule's set in a program of generation
// gen; -1 when the program holds a set from before this process (a
// handed-over program not swapped yet).
func (fr *fileRule) heldAt(gen uint64) int {
	for i := len(fr.sets) - 1; i >= 0; i-- {
		if fr.sets[i].gen <= gen {
			return i
		}
	}
	return -1
}

// prefixFile is one file of a rule and its last good contents.
type prefixFile struct {
	path     string
	key      string    // keySrcPrefixFile or keyDstPrefixFile
	stamp    fileStamp // of the last read, good or not
	sum      [sha256.Size]byte
	prefixes []netip.Prefix
	err      error // why the last read failed; nil when it was good
}

// fileStamp tells a changed file from the one read last: a file replaced
// by rename is another inode, one written in place has another size or
// modification or change time.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// TrustPrefixFiles makes the plugin read prefix files under the trust
// check for uid (see internal/trust), as the config was read: with raised
// capabilities, whoever may write a prefix file decides what is dropped.
func (x *XDPDrop) TrustPrefixFiles(uid int) {
	x.files.Trust(uid)
}

// Trust makes Load and Refresh read the files under the trust check for uid.
func (pl *prefixLists) Trust(uid int) {
	pl.trustCheck, pl.trustUID = true, uid
}

// checkPrefixFilePaths checks the paths of a prefix file option.
func checkPrefixFilePaths(key string, paths []string) error {
	if len(paths) > MaxPrefixFilesPerOption {
		return fmt.Errorf("%s lists %d files; an option lists at most %d: merge the lists into fewer files", key, len(paths), MaxPrefixFilesPerOption)
	}
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		switch {
		case p == "":
			return fmt.Errorf(`%s has an empty path; list files such as "/etc/telegraf-xdp-drop/lists/drop.txt"`, key)
		case len(p) > maxPath:
			return fmt.Errorf("%s: %s is %d bytes long; a path has at most %d", key, Quote(p), len(p), maxPath)
		case hasControl(p):
			return fmt.Errorf("%s: %s holds a NUL or control character; list the files' paths", key, Quote(p))
		case !filepath.IsAbs(p):
			return fmt.Errorf(`%s: %s is not an absolute path; write it from /, such as "/etc/telegraf-xdp-drop/lists/drop.txt"`, key, Quote(p))
		case seen[filepath.Clean(p)]:
			return fmt.Errorf("%s: %s is listed twice; list each file once", key, Quote(p))
		}
		seen[filepath.Clean(p)] = true
	}
	return nil
}

// Load reads the prefix files of rules into policy (whose rules are
// theirs, parsed), for Init: a file that cannot be read or parsed is an error. Every file is
// read, and the error joins the refusals of all (up to maxLineErrors bad
// lines of each); the files of an option whose paths are refused (parseRules
// said why) are not. readOnly shows a file's state rather than fail; log
// is where later changes are told.
func (pl *prefixLists) Load(rules []Rule, policy *bpf.Policy, readOnly bool, log telegraf.Logger) error {
	pl.log = log
	pl.rules = make([]*fileRule, len(rules))
	pl.gen = 1
	hasFiles := false
	now := time.Now()
	var listed listedPrefixes
	var errs []error
	nfiles := 0
	over := false // the files listed more prefixes than fit: no more is read
	for i := range rules {
		r := &rules[i]
		if len(r.SrcPrefixFile)+len(r.DstPrefixFile) == 0 {
			continue
		}
		hasFiles = true
		label := fmt.Sprintf("rule %q", r.Name)
		if checkRuleName(r.Name, i+1) != nil {
			label = fmt.Sprintf("rule %d", i+1)
		}
		fail := func(key string, err error) {
			for _, e := range Errors(err) {
				errs = append(errs, inRule(i+1, label, key, e))
			}
		}
		br := &policy.Rules[i]
		fr := &fileRule{index: i, name: r.Name, src: br.SrcPrefixes, dst: br.DstPrefixes}
		bad := false
		for _, f := range []struct {
			key   string
			paths []string
		}{{keySrcPrefixFile, r.SrcPrefixFile}, {keyDstPrefixFile, r.DstPrefixFile}} {
			if checkPrefixFilePaths(f.key, f.paths) != nil {
				bad = true
				continue
			}
			for _, path := range f.paths {
				if over {
					bad = true
					break
				}
				if nfiles++; nfiles > MaxPrefixFiles {
					fail(f.key, fmt.Errorf("%s: %s is prefix file %d of the rules; at most %d fit an instance: merge the lists into fewer files",
						f.key, Quote(path), nfiles, MaxPrefixFiles))
					bad = true
					continue
				}
				pf := &prefixFile{path: path, key: f.key}
				got, err := pl.readPrefixFile(pf, maxLineErrors)
				if err != nil && readOnly {
					// A read-only run shows the file's state rather than fail.
					pf.err = err
					fr.files = append(fr.files, pf)
					continue
				}
				if err != nil {
					fail(f.key, err)
					bad = true
					continue
				}
				listed.add(got.prefixes, 1)
				if err := listed.check(pf); err != nil {
					fail(f.key, err)
					bad, over = true, true
					continue
				}
				pf.stamp, pf.sum, pf.prefixes = got.stamp, got.sum, got.prefixes
				fr.files = append(fr.files, pf)
			}
		}
		if bad {
			continue
		}
		src, dst, err := fr.union(nil)
		if err != nil && readOnly {
			src, dst = fr.readable()
		} else if err != nil {
			fail("", err)
			continue
		}
		br.SrcPrefixes, br.DstPrefixes = src, dst
		fr.sets = []ruleSet{{gen: pl.gen, prefixes: len(src) + len(dst), loaded: now, logged: true}}
		pl.rules[i] = fr
	}
	if !hasFiles {
		pl.rules = nil
		return nil
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := checkPrefixTotals(policy.Rules); err != nil {
		return optionError("rule", fmt.Errorf("rule: %w", err))
	}
	return nil
}

// maxLineErrors is how many bad lines of a prefix file a start (and -check)
// reports; the rest are counted.
const maxLineErrors = 20

// listedPrefixes counts the prefixes every prefix file together lists, by
// family, repeats counted: what reading them holds in memory.
type listedPrefixes struct{ v4, v6 int }

// add adds (sign 1) or takes away (sign -1) the prefixes of ps.
func (l *listedPrefixes) add(ps []netip.Prefix, sign int) {
	for _, p := range ps {
		if p.Addr().Is4() {
			l.v4 += sign
		} else {
			l.v6 += sign
		}
	}
}

// check refuses more than bpf.MaxPrefixes listed of a family, once pf's
// contents are counted in: reading stops there.
func (l *listedPrefixes) check(pf *prefixFile) error {
	for _, f := range []struct {
		name string
		n    int
	}{{"IPv4", l.v4}, {"IPv6", l.v6}} {
		if f.n > bpf.MaxPrefixes {
			return fmt.Errorf("%s: with %s the prefix files list %d %s prefixes (repeats counted); at most %d per family fit: shorten or merge the lists",
				pf.key, pf.path, f.n, f.name, bpf.MaxPrefixes)
		}
	}
	return nil
}

// union is the rule's prefixes: those of its options and of its files,
// the files' pending contents where given. It refuses a direction with
// files but no prefix.
func (fr *fileRule) union(pending map[*prefixFile]*fileRead) (src, dst []netip.Prefix, err error) {
	src, dst = slices.Clone(fr.src), slices.Clone(fr.dst)
	var srcFiles, dstFiles bool
	for _, pf := range fr.files {
		ps := pf.prefixes
		if p, ok := pending[pf]; ok {
			ps = p.prefixes
		}
		if pf.key == keySrcPrefixFile {
			src, srcFiles = append(src, ps...), true
		} else {
			dst, dstFiles = append(dst, ps...), true
		}
	}
	src, dst = uniquePrefixes(src), uniquePrefixes(dst)
	for _, d := range []struct {
		key   string
		files bool
		n     int
	}{{keySrcPrefixFile, srcFiles, len(src)}, {keyDstPrefixFile, dstFiles, len(dst)}} {
		if d.files && d.n == 0 {
			// A rule without prefixes in a direction matches every address.
			return nil, nil, fmt.Errorf("%s: the files list no prefix, and a rule with none would match every address; "+
				"keep at least one prefix in them (an empty list is refused, as a write caught mid-way would be)", d.key)
		}
	}
	return src, dst, nil
}

// readable is the rule's prefixes from its options and the files that
// read, without union's refusal of a direction left empty: what a
// read-only run describes when a file fails.
func (fr *fileRule) readable() (src, dst []netip.Prefix) {
	src, dst = slices.Clone(fr.src), slices.Clone(fr.dst)
	for _, pf := range fr.files {
		if pf.key == keySrcPrefixFile {
			src = append(src, pf.prefixes...)
		} else {
			dst = append(dst, pf.prefixes...)
		}
	}
	return uniquePrefixes(src), uniquePrefixes(dst)
}

// uniquePrefixes sorts ps and drops repeats: lists overlap, and the union
// is what the rule matches.
func uniquePrefixes(ps []netip.Prefix) []netip.Prefix {
	if len(ps) == 0 {
		return nil
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(ps)
}

// checkPrefixTotals refuses rules that list more prefixes of a family than
// the program holds.
func checkPrefixTotals(rules []bpf.Rule) error {
	var v4, v6 int
	for i := range rules {
		for _, p := range slices.Concat(rules[i].SrcPrefixes, rules[i].DstPrefixes) {
			if p.Addr().Is4() {
				v4++
			} else {
				v6++
			}
		}
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"IPv4", v4}, {"IPv6", v6}} {
		if f.n > bpf.MaxPrefixes {
			return fmt.Errorf("the rules and their prefix files list %d %s prefixes; at most %d per family fit: shorten the lists, or merge adjacent prefixes", f.n, f.name, bpf.MaxPrefixes)
		}
	}
	return nil
}

// fileRead is one good read of a prefix file.
type fileRead struct {
	stamp    fileStamp
	sum      [sha256.Size]byte
	prefixes []netip.Prefix
}

// readPrefixFile reads and parses a prefix file through one descriptor,
// under the trust check when the plugin has one. Errors name the option
// and the file (and the line): of up to maxErrs bad lines, joined.
func (pl *prefixLists) readPrefixFile(pf *prefixFile, maxErrs int) (*fileRead, error) {
	f, fi, err := pl.openPrefixFile(pf.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pf.key, err)
	}
	defer f.Close()
	if fi.Size() > MaxPrefixFileSize {
		return nil, fmt.Errorf("%s: %s is %d bytes; a prefix file has at most %d (64 MiB): check that it is a list of prefixes", pf.key, pf.path, fi.Size(), MaxPrefixFileSize)
	}
	read := &fileRead{stamp: stampOf(fi)}
	read.prefixes, read.sum, err = parsePrefixList(io.LimitReader(f, MaxPrefixFileSize+1), pf.path, maxErrs)
	if err != nil {
		var each []error
		for _, e := range Errors(err) {
			each = append(each, fmt.Errorf("%s: %w", pf.key, e))
		}
		return nil, errors.Join(each...)
	}
	return read, nil
}

func (pl *prefixLists) openPrefixFile(path string) (*os.File, fs.FileInfo, error) {
	uid := trust.NoCheck
	if pl.trustCheck {
		uid = pl.trustUID
	}
	f, fi, err := trust.OpenRegular(path, uid, "prefix file")
	var notRegular *trust.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, nil, fmt.Errorf("%w; list files of prefixes", err)
	}
	return f, fi, err
}

// ParsePrefixFile reads a prefix list: one prefix or address (a /32 or
// /128) per line, IPv4 and IPv6 mixed, blank lines, and comments from # or
// ; to the end of the line, as Spamhaus DROP and FireHOL netsets write
// them. name is the file's, for errors, which say name:line and what is
// wrong. It returns the prefixes (with repeats) and the SHA-256 of the
// bytes read. A last line without a newline is refused, as a file caught
// mid-write would be; so are more prefixes of a family than every rule
// together may hold, a line longer than 4 KiB and more than 64 MiB.
func ParsePrefixFile(r io.Reader, name string) ([]netip.Prefix, [sha256.Size]byte, error) {
	return parsePrefixList(r, name, 1)
}

// parsePrefixList is ParsePrefixFile reporting up to maxErrs lines that are
// no prefix, joined, and how many more there are; an error that stops
// reading (a line too long, no last newline, too large, too many prefixes)
// ends the list.
func parsePrefixList(r io.Reader, name string, maxErrs int) ([]netip.Prefix, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(r, h), maxPrefixLine)
	var out []netip.Prefix
	var bad []error
	var v4, v6, size, more int
	stop := func(err error) ([]netip.Prefix, [sha256.Size]byte, error) {
		return nil, sum, errors.Join(append(bad, moreLines(name, more), err)...)
	}
	for line := 1; ; line++ {
		raw, err := br.ReadSlice('\n')
		size += len(raw)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return stop(fmt.Errorf("%s:%d: longer than %d bytes; a prefix file holds one prefix per line", name, line, maxPrefixLine))
		case err == io.EOF && len(raw) > 0:
			return stop(fmt.Errorf("%s:%d: the last line has no newline, as in a file caught mid-write; "+
				"write the list to a temporary file and rename it into place (end the last line with a newline)", name, line))
		case err == io.EOF && len(bad) > 0:
			return stop(nil)
		case err == io.EOF:
			copy(sum[:], h.Sum(nil))
			return out, sum, nil
		case err != nil:
			return stop(fmt.Errorf("%s: %w", name, err))
		case size > MaxPrefixFileSize:
			return stop(fmt.Errorf("%s: larger than %d bytes (64 MiB); a prefix file has at most that", name, MaxPrefixFileSize))
		}
		text := raw
		if i := bytes.IndexAny(text, "#;"); i >= 0 {
			text = text[:i]
		}
		text = bytes.TrimSpace(text)
		if len(text) == 0 {
			continue
		}
		p, err := parseListedPrefix(string(text))
		if err != nil {
			if len(bad) < maxErrs {
				bad = append(bad, fmt.Errorf("%s:%d: %w", name, line, err))
			} else {
				more++
			}
			if maxErrs <= 1 {
				return stop(nil)
			}
			continue
		}
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
		if v4 > bpf.MaxPrefixes || v6 > bpf.MaxPrefixes {
			return stop(fmt.Errorf("%s:%d: more than %d prefixes of a family; at most that many fit every rule together: shorten the list", name, line, bpf.MaxPrefixes))
		}
		out = append(out, p)
	}
}

// moreLines counts the bad lines of a file past those reported; nil for none.
func moreLines(name string, more int) error {
	switch more {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: 1 more line is no prefix", name)
	}
	return fmt.Errorf("%s: %d more lines are no prefix", name, more)
}

// parseListedPrefix reads one prefix of a list; a bare address is a host
// prefix.
func parseListedPrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return p, fmt.Errorf(`%s is not an address prefix or address; write one per line, such as "192.0.2.0/24" or "2001:db8::1"`, Quote(s))
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("%s is an IPv4-mapped IPv6 prefix, which IPv4 frames never carry; write the IPv4 prefix", Quote(s))
	}
	if m := p.Masked(); m != p {
		return p, fmt.Errorf("%s has host bits set; did you mean %q?", Quote(s), m.String())
	}
	return p, nil
}

// Refresh reads the prefix files that changed since the last gather and
// returns policy with the changed rules' new prefixes, and true, when a
// set changed (a new generation); the interfaces' programs follow in
// swapPrefixes. A file that fails keeps its last good contents; its error
// goes to acc once per change and stays on the rule's points until fixed.
func (pl *prefixLists) Refresh(acc telegraf.Accumulator, policy bpf.Policy) (bpf.Policy, bool) {
	if pl.rules == nil {
		return policy, false
	}
	defer pl.markLoaded(time.Now())
	pending, changed := pl.readChangedFiles(acc)
	if len(changed) == 0 {
		return policy, false
	}
	return pl.applyPrefixFiles(acc, policy, pending, changed)
}

// readChangedFiles reads the files whose stat changed; it returns the new
// contents of those that read and parse and differ, and their rules.
func (pl *prefixLists) readChangedFiles(acc telegraf.Accumulator) (map[*prefixFile]*fileRead, []*fileRule) {
	pending := map[*prefixFile]*fileRead{}
	var changed []*fileRule
	var listed listedPrefixes
	for _, fr := range pl.rules {
		if fr == nil {
			continue
		}
		for _, pf := range fr.files {
			listed.add(pf.prefixes, 1)
		}
	}
	for _, fr := range pl.rules {
		if fr == nil {
			continue
		}
		dirty := false
		for _, pf := range fr.files {
			fi, err := os.Stat(pf.path)
			if err == nil && stampOf(fi) == pf.stamp {
				continue // unchanged: in force, or failed and reported already
			}
			var got *fileRead
			if err == nil {
				pl.boundMemory()
				got, err = pl.readPrefixFile(pf, 1)
			} else {
				err = fmt.Errorf("%s: %w", pf.key, err)
			}
			if err != nil {
				var untrusted *trust.UntrustedError
				// A refusal may be lifted on a directory above, which the
				// file's stamp does not see: it is read again every gather.
				if fi != nil && !errors.As(err, &untrusted) {
					pf.stamp = stampOf(fi)
				} else {
					pf.stamp = fileStamp{}
				}
				pl.prefixFileFailed(acc, fr, pf, err)
				continue
			}
			pf.stamp = got.stamp
			if got.sum == pf.sum {
				pl.readsAgain(fr, pf)
				continue
			}
			listed.add(pf.prefixes, -1)
			listed.add(got.prefixes, 1)
			if err := listed.check(pf); err != nil {
				listed.add(got.prefixes, -1)
				listed.add(pf.prefixes, 1)
				pl.prefixFileFailed(acc, fr, pf, err)
				continue
			}
			pending[pf] = got
			dirty = true
		}
		if dirty {
			changed = append(changed, fr)
		}
	}
	return pending, changed
}

// applyPrefixFiles puts the changed rules' new sets in the policy, unless
// a set has a direction without prefixes or the sets pass the limit: then
// those files' new contents are refused and the sets in force stay.
func (pl *prefixLists) applyPrefixFiles(acc telegraf.Accumulator, policy bpf.Policy, pending map[*prefixFile]*fileRead, changed []*fileRule) (bpf.Policy, bool) {
	next := policy
	next.Rules = slices.Clone(policy.Rules)
	var applied []*fileRule
	for _, fr := range changed {
		src, dst, err := fr.union(pending)
		if err != nil {
			pl.refusePending(acc, fr, pending, err)
			continue
		}
		next.Rules[fr.index].SrcPrefixes, next.Rules[fr.index].DstPrefixes = src, dst
		applied = append(applied, fr)
	}
	if err := checkPrefixTotals(next.Rules); err != nil {
		for _, fr := range applied {
			pl.refusePending(acc, fr, pending, err)
		}
		return policy, false
	}
	if len(applied) == 0 {
		return policy, false
	}
	gen := pl.gen + 1
	swap := false
	for _, fr := range applied {
		var paths []string
		for _, pf := range fr.files {
			if got, has := pending[pf]; has {
				pf.sum, pf.prefixes = got.sum, got.prefixes
				pl.readsAgain(fr, pf)
				if !slices.Contains(paths, pf.path) { // one file may feed both directions
					paths = append(paths, pf.path)
				}
			}
		}
		cur, r := &policy.Rules[fr.index], &next.Rules[fr.index]
		if slices.Equal(cur.SrcPrefixes, r.SrcPrefixes) && slices.Equal(cur.DstPrefixes, r.DstPrefixes) {
			continue // rewritten, or reordered: the same set
		}
		addSrc, remSrc := diffPrefixes(cur.SrcPrefixes, r.SrcPrefixes)
		addDst, remDst := diffPrefixes(cur.DstPrefixes, r.DstPrefixes)
		// The set in force goes on loading good until this one replaces it:
		// its loaded is frozen as of the last gather.
		fr.sets = append(fr.sets, ruleSet{
			gen: gen, prefixes: len(r.SrcPrefixes) + len(r.DstPrefixes),
			added: addSrc + addDst, removed: remSrc + remDst,
			loaded: fr.cur().loaded, files: paths,
		})
		swap = true
	}
	if !swap {
		return policy, false
	}
	pl.gen = gen
	return next, true
}

// diffPrefixes counts the prefixes of next not in cur and of cur not in
// next; both are sorted and without repeats (uniquePrefixes).
func diffPrefixes(cur, next []netip.Prefix) (added, removed int) {
	i, j := 0, 0
	for i < len(cur) && j < len(next) {
		switch c := comparePrefixes(cur[i], next[j]); {
		case c < 0:
			removed++
			i++
		case c > 0:
			added++
			j++
		default:
			i++
			j++
		}
	}
	return added + len(next) - j, removed + len(cur) - i
}

// comparePrefixes orders prefixes by address, then length.
func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// noteInForce logs each rule's changes that every program now holds: held
// is the oldest generation an attached interface's program holds (0 for a
// set from before this process). Sets no program holds any more are
// forgotten.
func (pl *prefixLists) noteInForce(held uint64) {
	for _, fr := range pl.rules {
		if fr == nil {
			continue
		}
		for i := range fr.sets {
			set := &fr.sets[i]
			if set.logged || set.gen > held {
				continue
			}
			set.logged = true
			if i == len(fr.sets)-1 {
				pl.log.Infof("rule %q: %s: +%d −%d, %s in force", fr.name, filesNamed(set.files), set.added, set.removed, Thousands(uint64(set.prefixes)))
			}
		}
		if i := fr.heldAt(held); i > 0 {
			fr.sets = slices.Delete(fr.sets, 0, i)
		}
	}
}

// filesNamed names the files of a change: file "a", or files "a", "b".
func filesNamed(paths []string) string {
	quoted := make([]string, len(paths))
	for i, p := range paths {
		quoted[i] = Quote(p)
	}
	if len(quoted) == 1 {
		return "file " + quoted[0]
	}
	return "files " + strings.Join(quoted, ", ")
}

// markLoaded notes that every file of a rule without a failing one loads
// good as of now: loaded stands still while a file fails.
func (pl *prefixLists) markLoaded(now time.Time) {
	for _, fr := range pl.rules {
		if fr != nil && !slices.ContainsFunc(fr.files, func(pf *prefixFile) bool { return pf.err != nil }) {
			fr.cur().loaded = now
		}
	}
}

// readsAgain clears the error of a file whose contents are in force again.
func (pl *prefixLists) readsAgain(fr *fileRule, pf *prefixFile) {
	if pf.err != nil {
		pl.log.Infof("rule %q: %s %s loads again", fr.name, pf.key, pf.path)
		pf.err = nil
	}
}

// refusePending keeps the rule's set in force: its changed files' new
// contents are refused with err, a fault of the set rather than of one
// file, so they are read again at the next gather (err is not repeated).
func (pl *prefixLists) refusePending(acc telegraf.Accumulator, fr *fileRule, pending map[*prefixFile]*fileRead, err error) {
	for _, pf := range fr.files {
		if _, has := pending[pf]; has {
			delete(pending, pf)
			pf.stamp = fileStamp{}
			pl.prefixFileFailed(acc, fr, pf, err)
		}
	}
}

// prefixFileFailed records why a file's new contents are not in force and
// passes it to acc once per distinct error.
func (pl *prefixLists) prefixFileFailed(acc telegraf.Accumulator, fr *fileRule, pf *prefixFile, err error) {
	same := pf.err != nil && pf.err.Error() == err.Error()
	pf.err = err
	if !same {
		acc.AddError(fmt.Errorf("rule %q: %w; the last good prefixes stay in force", fr.name, err))
	}
}

// ruleFiles are the prefix file fields of a rule's points on one
// interface (see RuleSeries).
type ruleFiles struct {
	files                            bool
	prefixes, loaded, added, removed int64
	err                              string
}

// put sets the prefix file fields of s.
func (f ruleFiles) put(s *RuleSeries) {
	s.Files, s.Prefixes, s.Loaded, s.Added, s.Removed, s.Error = f.files, f.prefixes, f.loaded, f.added, f.removed, f.err
}

// Fields are the prefix file fields of rule i's points on an
// interface whose program holds the sets of generation gen: the set it
// holds (its prefixes, when its files last loaded good, its change), and
// the errors of files that fail and, when the program holds an older set
// than the policy's, swapErr, why it was not swapped in ("" when none).
func (pl *prefixLists) Fields(i int, gen uint64, swapErr error) ruleFiles {
	if i >= len(pl.rules) || pl.rules[i] == nil {
		return ruleFiles{}
	}
	fr := pl.rules[i]
	var errs []string
	for _, pf := range fr.files {
		if pf.err != nil {
			errs = append(errs, strings.ReplaceAll(pf.err.Error(), "\n", " "))
		}
	}
	out := ruleFiles{files: true}
	held := fr.heldAt(gen)
	if held != len(fr.sets)-1 {
		if swapErr == nil {
			swapErr = errors.New("not swapped in yet")
		}
		errs = append(errs, "the changed prefixes are not in force on this interface: "+strings.ReplaceAll(swapErr.Error(), "\n", " "))
	}
	if held >= 0 {
		// A set from before this process is not known: zeros.
		set := &fr.sets[held]
		out.prefixes, out.loaded = int64(set.prefixes), set.loaded.Unix()
		out.added, out.removed = int64(set.added), int64(set.removed)
	}
	msg := strings.Join(errs, "; ")
	if len(msg) > maxErrorField {
		msg = msg[:maxErrorField] + "…"
	}
	out.err = Printable(msg)
	return out
}

// maxErrorField bounds the error field of a rule's points.
const maxErrorField = 1024

// parseRuleFiles checks a rule's prefix file options and names the files
// in the rule (bpf.Rule.PrefixFiles); Init reads them.
func parseRuleFiles(r *Rule, out *bpf.Rule) error {
	if err := checkPrefixFilePaths(keySrcPrefixFile, r.SrcPrefixFile); err != nil {
		return err
	}
	if err := checkPrefixFilePaths(keyDstPrefixFile, r.DstPrefixFile); err != nil {
		return err
	}
	for _, p := range r.SrcPrefixFile {
		out.PrefixFiles = append(out.PrefixFiles, keySrcPrefixFile+" "+p)
	}
	for _, p := range r.DstPrefixFile {
		out.PrefixFiles = append(out.PrefixFiles, keyDstPrefixFile+" "+p)
	}
	return nil
}

// swapMemory is the memory limit while a changed set is read and swapped
// in, against what the Go runtime holds when it starts.
const swapMemory = 1.5

// boundMemory caps the Go runtime's memory while a changed set is read,
// compiled and swapped in: the new set is built beside the one in force,
// and without a limit the collector lets the heap grow to twice its live
// size first, which took the process to 3× its steady RSS for a
// 100,000-prefix list (BENCHMARKS.md). The limit is soft: the collector
// works harder near it, nothing fails. A lower limit set by GOMEMLIMIT is
// kept. releaseMemory restores it.
func (pl *prefixLists) boundMemory() {
	if pl.memoryBound {
		return
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := debug.SetMemoryLimit(-1)
	pl.memoryBound, pl.memoryBefore = true, before
	debug.SetMemoryLimit(min(before, int64(float64(ms.Sys-ms.HeapReleased)*swapMemory)))
}

// releaseMemory restores the memory limit boundMemory set, and returns what
// the swap freed to the system.
func (pl *prefixLists) releaseMemory() {
	if !pl.memoryBound {
		return
	}
	debug.SetMemoryLimit(pl.memoryBefore)
	pl.memoryBound = false
	debug.FreeOSMemory()
}
