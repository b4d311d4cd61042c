package xdp_drop

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

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
				pl.log.Infof("rule %s: %s: +%d −%d, %s in force", quote.Value(fr.name), filesNamed(set.files), set.added, set.removed, quote.Thousands(uint64(set.prefixes)))
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
		quoted[i] = quote.Value(p)
	}
	if len(quoted) == 1 {
		return "file " + quoted[0]
	}
	return "files " + strings.Join(quoted, ", ")
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
	out.err = quote.Line(msg)
	return out
}

// maxErrorField bounds the error field of a rule's points.
const maxErrorField = 1024
