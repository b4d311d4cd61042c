package xdp_drop

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/trust"
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

// Trust makes Load and Refresh read the files under the trust check for uid.
func (pl *prefixLists) Trust(uid int) {
	pl.trustCheck, pl.trustUID = true, uid
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
		label := "rule " + quote.Value(r.Name)
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
						f.key, quote.Value(path), nfiles, MaxPrefixFiles))
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
				listed.add(1, got.prefixes...)
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

// trustedUID is the user the files are checked for, or trust.NoCheck.
func (pl *prefixLists) trustedUID() int {
	if pl.trustCheck {
		return pl.trustUID
	}
	return trust.NoCheck
}

func (pl *prefixLists) openPrefixFile(path string) (*os.File, fs.FileInfo, error) {
	f, fi, err := trust.OpenRegular(path, pl.trustedUID(), "prefix file")
	var notRegular *trust.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, nil, fmt.Errorf("%w; list files of prefixes", err)
	}
	return f, fi, err
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
			listed.add(1, pf.prefixes...)
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
			listed.add(-1, pf.prefixes...)
			listed.add(1, got.prefixes...)
			if err := listed.check(pf); err != nil {
				listed.add(-1, got.prefixes...)
				listed.add(1, pf.prefixes...)
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
		pl.log.Infof("rule %s: %s %s loads again", quote.Value(fr.name), pf.key, pf.path)
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
		acc.AddError(fmt.Errorf("rule %s: %w; the last good prefixes stay in force", quote.Value(fr.name), err))
	}
}
