package xdp_drop

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
	ibans "github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// allowList is the bans' allowed prefixes: those of allow_prefix, and
// those of the allow_prefix_file files as last read good, with their
// stamps, so that a file changed is read again (as a rule's prefix file
// is) and the new set put in force.
type allowList struct {
	inline []netip.Prefix
	files  []*prefixFile
	reader prefixLists // reads the files, under its trust check
}

// load reads the options and the files for Init; fail is given each
// refusal and its option.
func (a *allowList) load(c *BansConfig, fail func(key string, err error)) {
	var err error
	bad := false
	if a.inline, err = parsePrefixes(c.AllowPrefix); err != nil {
		fail(keyAllowPrefix, fmt.Errorf("%s: %w", keyAllowPrefix, err))
		bad = true
	}
	for i, p := range a.inline {
		if ibans.WholeFamily(p) {
			fail(keyAllowPrefix, fmt.Errorf("%s: %s %s", keyAllowPrefix, quote.Value(c.AllowPrefix[i]), allowsWholeFamily))
			bad = true
		}
	}
	if err := checkPrefixFilePaths(keyAllowPrefixFile, c.AllowPrefixFile); err != nil {
		fail(keyAllowPrefixFile, err)
		return
	}
	for _, path := range c.AllowPrefixFile {
		pf := &prefixFile{path: path, key: keyAllowPrefixFile}
		got, err := a.reader.readPrefixFile(pf, maxLineErrors)
		if err != nil {
			for _, e := range Errors(err) {
				fail(keyAllowPrefixFile, e)
			}
			bad = true
			continue
		}
		if err := wholeFamilyIn(pf.path, got.prefixes); err != nil {
			fail(keyAllowPrefixFile, fmt.Errorf("%s: %w", keyAllowPrefixFile, err))
			bad = true
			continue
		}
		pf.stamp, pf.sum, pf.prefixes = got.stamp, got.sum, got.prefixes
		a.files = append(a.files, pf)
	}
	if !bad {
		_, err = a.union()
		fail(keyAllowPrefix, err)
	}
}

// union is every allowed prefix, each once, within the ban maps' bound.
func (a *allowList) union() ([]netip.Prefix, error) {
	all := append([]netip.Prefix(nil), a.inline...)
	for _, pf := range a.files {
		all = append(all, pf.prefixes...)
	}
	all = uniquePrefixes(all)
	if v4, v6 := familyCounts(all); max(v4, v6) > bpf.MaxBanAllow {
		return nil, fmt.Errorf("%s and allow_prefix_file allow %s IPv4 and %s IPv6 prefixes; at most %s a family fit the ban maps: merge them into wider prefixes",
			keyAllowPrefix, quote.Thousands(uint64(v4)), quote.Thousands(uint64(v6)), quote.Thousands(bpf.MaxBanAllow))
	}
	return all, nil
}

// count is how many prefixes are allowed, each once.
func (a *allowList) count() int {
	all, _ := a.union()
	return len(all)
}

// refresh reads the files whose stamp changed. changed says a file's
// contents differ: the union is to be put in force. A file that fails
// keeps its last good contents (its error is returned, and it is read
// again at the next call); so does every file when the union is too large.
func (a *allowList) refresh() (changed bool, err error) {
	var errs []error
	pending := map[*prefixFile]*fileRead{}
	for _, pf := range a.files {
		fi, err := os.Stat(pf.path)
		if err == nil && stampOf(fi) == pf.stamp {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pf.key, err))
			continue
		}
		got, err := a.reader.readPrefixFile(pf, 1)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got.sum == pf.sum {
			pf.stamp = got.stamp
			continue
		}
		if err := wholeFamilyIn(pf.path, got.prefixes); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pf.key, err))
			continue
		}
		pending[pf] = got
	}
	if len(pending) > 0 {
		old := map[*prefixFile][]netip.Prefix{}
		for pf, got := range pending {
			old[pf], pf.prefixes = pf.prefixes, got.prefixes
		}
		if _, err := a.union(); err != nil {
			for pf := range pending {
				pf.prefixes = old[pf]
			}
			return false, errors.Join(append(errs, err)...)
		}
		for pf, got := range pending {
			pf.stamp, pf.sum = got.stamp, got.sum
		}
	}
	return len(pending) > 0, errors.Join(errs...)
}

// allowsWholeFamily: an allowed prefix covering a family would turn every
// ban of that family off, silently; the ban table refuses it.
const allowsWholeFamily = "allows a whole address family, so no ban of it would ever drop: give the prefixes of your management networks instead"

// wholeFamilyIn says at which line of path a prefix of prefixes covers a
// whole family; nil when none does. The file is read again for the line
// only then.
func wholeFamilyIn(path string, prefixes []netip.Prefix) error {
	if !slices.ContainsFunc(prefixes, ibans.WholeFamily) {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: a prefix %s", path, allowsWholeFamily)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if j := strings.IndexAny(line, "#;"); j >= 0 {
			line = line[:j]
		}
		if p, err := parsePrefix(strings.TrimSpace(line), notListedPrefix); err == nil && ibans.WholeFamily(p) {
			return fmt.Errorf("%s:%d: %s %s", path, i+1, quote.Value(strings.TrimSpace(line)), allowsWholeFamily)
		}
	}
	return fmt.Errorf("%s: a prefix %s", path, allowsWholeFamily)
}
