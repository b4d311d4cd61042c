package xdp_drop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
)

// writeList replaces path with lines by rename, as writers are told to.
func writeList(t testing.TB, path string, lines ...string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func fileRulePlugin(rules ...Rule) *XDPDrop {
	return withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Rules: rules, Log: testutil.Logger{}})
}

// TestInitPrefixFiles: a rule's prefixes are the union of src_prefix and
// its files, repeats merged; the files name the rule's counters.
func TestInitPrefixFiles(t *testing.T) {
	dir := t.TempDir()
	drop, edrop := filepath.Join(dir, "drop.txt"), filepath.Join(dir, "edrop.txt")
	writeList(t, drop, "; DROP", "203.0.113.0/24 ; SBL1", "2001:db8:bad::/48")
	writeList(t, edrop, "203.0.113.0/24", "198.51.100.7")
	p := fileRulePlugin(
		Rule{Name: "mgmt", Action: "pass", SrcPrefix: []string{"192.0.2.0/24"}},
		Rule{Name: "spamhaus", Action: "drop", SrcPrefix: []string{"192.0.2.128/25"}, SrcPrefixFile: []string{drop, edrop}, DstPrefixFile: []string{edrop}},
	)
	require.NoError(t, p.Init())
	r := p.links.policy.Rules[1]
	require.Equal(t, mustPrefixes("192.0.2.128/25", "198.51.100.7/32", "203.0.113.0/24", "2001:db8:bad::/48"), r.SrcPrefixes)
	require.Equal(t, mustPrefixes("198.51.100.7/32", "203.0.113.0/24"), r.DstPrefixes)
	require.Equal(t, []string{"src_prefix_file " + drop, "src_prefix_file " + edrop, "dst_prefix_file " + edrop}, r.PrefixFiles)
	f := p.files.Fields(1, p.files.gen, nil)
	require.True(t, f.files)
	require.Equal(t, int64(6), f.prefixes)
	require.InDelta(t, time.Now().Unix(), f.loaded, 5)
	require.Zero(t, f.added+f.removed, "no change yet")
	require.Empty(t, f.err)
	require.False(t, p.files.Fields(0, p.files.gen, nil).files, "a rule without files has no file fields")

	// The same prefixes written in the TOML give the same rule: the same
	// compiled maps, the same per-packet cost.
	inTOML := fileRulePlugin(Rule{Name: "spamhaus", Action: "drop",
		SrcPrefix: []string{"192.0.2.128/25", "198.51.100.7/32", "203.0.113.0/24", "2001:db8:bad::/48"},
		DstPrefix: []string{"198.51.100.7/32", "203.0.113.0/24"}})
	require.NoError(t, inTOML.Init())
	r.PrefixFiles = nil
	require.Equal(t, inTOML.links.policy.Rules[0], r)
}

// TestInitPrefixFileErrors: Init refuses a missing or malformed file,
// naming the rule, the option, the file and the line.
func TestInitPrefixFileErrors(t *testing.T) {
	dir := t.TempDir()
	good, bad, empty, big := filepath.Join(dir, "good.txt"), filepath.Join(dir, "bad.txt"), filepath.Join(dir, "empty.txt"), filepath.Join(dir, "big.txt")
	writeList(t, good, "203.0.113.0/24")
	writeList(t, bad, "203.0.113.0/24", "# fine", "198.51.100.1/24")
	writeList(t, empty, "# nothing yet")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxPrefixFileSize+1))
	require.NoError(t, f.Close())
	rule := func(r Rule) Rule { r.Name, r.Action = "list", "drop"; return r }
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{rule(Rule{SrcPrefixFile: []string{filepath.Join(dir, "missing.txt")}}), `rule "list": src_prefix_file: open ` + filepath.Join(dir, "missing.txt") + `: no such file or directory`},
		{rule(Rule{SrcPrefixFile: []string{good, bad}}), `rule "list": src_prefix_file: ` + bad + `:3: "198.51.100.1/24" has host bits set; did you mean "198.51.100.0/24"?`},
		{rule(Rule{DstPrefixFile: []string{empty}}), `rule "list": dst_prefix_file: the files list no prefix, and a rule with none would match every address`},
		{rule(Rule{SrcPrefixFile: []string{big}}), `rule "list": src_prefix_file: ` + big + ` is 67108865 bytes; a prefix file has at most 67108864 (64 MiB)`},
		{rule(Rule{SrcPrefixFile: []string{dir}}), `rule "list": src_prefix_file: ` + dir + `: not a regular file (a directory)`},
		{rule(Rule{SrcPrefixFile: []string{"lists/drop.txt"}}), `rule "list": src_prefix_file: "lists/drop.txt" is not an absolute path`},
		{rule(Rule{SrcPrefixFile: []string{good, good}}), `rule "list": src_prefix_file: "` + good + `" is listed twice`},
		{rule(Rule{SrcPrefixFile: []string{}}), `rule "list": src_prefix_file = [] lists no value`},
	} {
		err := fileRulePlugin(c.rule).Init()
		require.ErrorContains(t, err, c.want)
	}
}

// TestRefreshPrefixFiles: a changed file is put in force; a malformed one
// keeps the last good set and says file:line once; a removed one keeps the
// set with the error; fixing it clears the error.
func TestRefreshPrefixFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drop.txt")
	writeList(t, path, "203.0.113.0/24")
	p := fileRulePlugin(Rule{Name: "list", Action: "drop", SrcPrefixFile: []string{path}})
	require.NoError(t, p.Init())
	gen := p.files.gen
	refresh := func() *testutil.Accumulator {
		acc := &testutil.Accumulator{}
		p.links.refreshPrefixFiles(acc)
		p.files.releaseMemory() // as a gather's swap does
		return acc
	}
	fields := func() (int64, string) {
		f := p.files.Fields(0, p.files.gen, nil)
		return f.prefixes, f.err
	}

	require.Empty(t, refresh().Errors, "unchanged")
	require.Equal(t, gen, p.files.gen)

	writeList(t, path, "203.0.113.0/24", "198.51.100.0/24")
	require.Empty(t, refresh().Errors)
	require.Equal(t, gen+1, p.files.gen, "a new set")
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), p.links.policy.Rules[0].SrcPrefixes)
	n, errText := fields()
	require.Equal(t, int64(2), n)
	require.Empty(t, errText)

	loaded := p.files.rules[0].cur().loaded
	writeList(t, path, "203.0.113.0/24", "192.0.2.1/24")
	acc := refresh()
	require.Len(t, acc.Errors, 1)
	want := `rule "list": src_prefix_file: ` + path + `:2: "192.0.2.1/24" has host bits set; did you mean "192.0.2.0/24"?`
	require.EqualError(t, acc.Errors[0], want+"; the last good prefixes stay in force")
	require.Equal(t, gen+1, p.files.gen, "the old set stays")
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), p.links.policy.Rules[0].SrcPrefixes)
	n, errText = fields()
	require.Equal(t, int64(2), n)
	require.Equal(t, strings.TrimPrefix(want, `rule "list": `), errText)
	require.Empty(t, refresh().Errors, "reported once per change")

	require.NoError(t, os.Remove(path))
	acc = refresh()
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], "no such file or directory; the last good prefixes stay in force")
	require.Empty(t, refresh().Errors, "reported once")
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), p.links.policy.Rules[0].SrcPrefixes)
	_, errText = fields()
	require.Contains(t, errText, "no such file or directory")
	require.Equal(t, loaded, p.files.rules[0].cur().loaded, "loaded stands still while the file fails")

	writeList(t, path, "198.51.100.0/24", "203.0.113.0/24")
	require.Empty(t, refresh().Errors)
	_, errText = fields()
	require.Empty(t, errText, "fixed")
	require.True(t, p.files.rules[0].cur().loaded.After(loaded), "loaded again")
	require.Equal(t, gen+1, p.files.gen, "the same prefixes, reordered: no new set")

	writeList(t, path, "# emptied")
	require.Len(t, refresh().Errors, 1)
	require.Equal(t, gen+1, p.files.gen, "an empty list is refused")
	require.Empty(t, refresh().Errors, "read again, reported once")
}

// hostAddrs is n distinct IPv4 host addresses from 10.0.0.0/8 on, skipping
// the first skip.
func hostAddrs(skip, n int) []string {
	out := make([]string, n)
	for i := range out {
		a := skip + i
		out[i] = fmt.Sprintf("10.%d.%d.%d", a>>16&255, a>>8&255, a&255)
	}
	return out
}

// TestInitPrefixFileCount: Init refuses more than 64 files in an option
// and more than 256 in all the rules, naming the rule and the option.
func TestInitPrefixFileCount(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := range MaxPrefixFilesPerOption + 1 {
		paths = append(paths, filepath.Join(dir, fmt.Sprintf("%d.txt", i)))
		writeList(t, paths[i], fmt.Sprintf("192.0.2.%d", i))
	}
	err := fileRulePlugin(Rule{Name: "many", Action: "drop", DstPrefixFile: paths}).Init()
	require.EqualError(t, err, `rule "many": dst_prefix_file lists 65 files; an option lists at most 64: merge the lists into fewer files`)

	var rules []Rule
	for i := range MaxPrefixFiles / MaxPrefixFilesPerOption {
		rules = append(rules, Rule{Name: fmt.Sprintf("r%d", i), Action: "drop", SrcPrefixFile: paths[:MaxPrefixFilesPerOption]})
	}
	require.NoError(t, fileRulePlugin(rules...).Init(), "256 files fit")
	rules = append(rules, Rule{Name: "one-more", Action: "drop", DstPrefixFile: paths[64:]})
	err = fileRulePlugin(rules...).Init()
	require.EqualError(t, err, `rule "one-more": dst_prefix_file: "`+paths[64]+`" is prefix file 257 of the rules; at most 256 fit an instance: merge the lists into fewer files`)
}

// TestPrefixListsRefreshLeavesPolicy: Refresh hands back a new policy with
// the changed rule's prefixes and leaves the one it was given as it was;
// the plugin puts it in force.
func TestPrefixListsRefreshLeavesPolicy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drop.txt")
	writeList(t, path, "203.0.113.0/24")
	p := fileRulePlugin(
		Rule{Name: "mgmt", Action: "pass", SrcPrefix: []string{"192.0.2.0/24"}},
		Rule{Name: "list", Action: "drop", SrcPrefixFile: []string{path}})
	require.NoError(t, p.Init())
	before := p.links.policy
	gen := p.files.gen

	next, changed := p.files.Refresh(&testutil.Accumulator{}, before)
	require.False(t, changed, "unchanged files")
	require.Equal(t, before.Rules, next.Rules)

	writeList(t, path, "203.0.113.0/24", "198.51.100.0/24")
	acc := &testutil.Accumulator{}
	next, changed = p.files.Refresh(acc, before)
	p.files.releaseMemory()
	require.Empty(t, acc.Errors)
	require.True(t, changed)
	require.Equal(t, gen+1, p.files.gen)
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), next.Rules[1].SrcPrefixes)
	require.Equal(t, before.Rules[0], next.Rules[0], "the rule without files is the same")
	require.Equal(t, mustPrefixes("203.0.113.0/24"), before.Rules[1].SrcPrefixes, "the policy given stays")
	require.Equal(t, mustPrefixes("203.0.113.0/24"), p.links.policy.Rules[1].SrcPrefixes, "the plugin's policy changes only when the plugin puts next in force")
	old := p.files.Fields(1, gen, nil)
	require.Equal(t, int64(1), old.prefixes, "a program of the generation before holds the set before")
	require.Equal(t, "the changed prefixes are not in force on this interface: not swapped in yet", old.err)
}
