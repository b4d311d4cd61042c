package xdp_drop

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// TestParsePrefixFileFormats reads lists written as Spamhaus DROP and
// FireHOL netsets write them: comments after ; and #, headers, bare
// addresses as host prefixes.
func TestParsePrefixFileFormats(t *testing.T) {
	for _, c := range []struct {
		file string
		want []netip.Prefix
	}{
		{"spamhaus-drop.txt", mustPrefixes("1.10.16.0/20", "1.19.0.0/16", "2.56.192.0/22", "5.42.92.0/24", "223.254.0.0/16")},
		{"spamhaus-drop-v6.txt", mustPrefixes("2001:678:738::/48", "2a06:5280::/29")},
		{"firehol_level1.netset", mustPrefixes("0.0.0.0/8", "1.10.16.0/20", "5.188.10.179/32", "45.14.224.0/22", "185.234.216.59/32", "192.0.2.0/24", "100.64.0.0/10")},
	} {
		t.Run(c.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "prefixfiles", c.file))
			require.NoError(t, err)
			got, _, err := ParsePrefixFile(bytes.NewReader(raw), c.file)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
	got, _, err := ParsePrefixFile(strings.NewReader("192.0.2.1\r\n\t2001:db8::/32   # mixed, CRLF\r\n\n   \n; only a comment\n"), "mixed")
	require.NoError(t, err)
	require.Equal(t, mustPrefixes("192.0.2.1/32", "2001:db8::/32"), got)
}

// TestParsePrefixFileErrors names the file and the line and says what is
// wrong and what to write.
func TestParsePrefixFileErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"192.0.2.0/24\n192.0.2.1/24 ; SBL1\n", `list.txt:2: "192.0.2.1/24" has host bits set; did you mean "192.0.2.0/24"?`},
		{"# header\n\nexample.com\n", `list.txt:3: "example.com" is not an address prefix or address; write one per line`},
		{"192.0.2.0/33\n", `list.txt:1: "192.0.2.0/33" is not an address prefix`},
		{"fe80::1%eth0\n", `list.txt:1: "fe80::1%eth0" is not an address prefix`},
		{"::ffff:192.0.2.0/120\n", `list.txt:1: "::ffff:192.0.2.0/120" is an IPv4-mapped IPv6 prefix`},
		{"192.0.2.0/24\n198.51.10", `list.txt:2: the last line has no newline, as in a file caught mid-write; write the list to a temporary file and rename it into place`},
		{strings.Repeat("x", 5000) + "\n", `list.txt:1: longer than 4096 bytes`},
	} {
		_, _, err := ParsePrefixFile(strings.NewReader(c.text), "list.txt")
		require.ErrorContains(t, err, c.want)
	}
}

// TestParsePrefixFileGarbage refuses 64 MiB of garbage at its first line,
// reading a few KiB, and more than a family's limit of prefixes as soon as
// the limit is passed.
func TestParsePrefixFileGarbage(t *testing.T) {
	garbage := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte{0xa5}, MaxPrefixFileSize))}
	start := time.Now()
	_, _, err := ParsePrefixFile(garbage, "garbage")
	require.ErrorContains(t, err, "garbage:1: longer than 4096 bytes")
	require.Less(t, garbage.n, 64<<10, "bytes read")
	t.Logf("64 MiB of garbage refused after %d bytes in %s", garbage.n, time.Since(start))

	lines := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte("garbage line\n"), MaxPrefixFileSize/13))}
	_, _, err = ParsePrefixFile(lines, "lines")
	require.ErrorContains(t, err, `lines:1: "garbage line" is not an address prefix`)
	require.Less(t, lines.n, 64<<10, "bytes read")

	var many bytes.Buffer
	for i := range bpf.MaxPrefixes + 1 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		many.WriteString(a.String() + "\n")
	}
	_, _, err = ParsePrefixFile(&many, "many")
	require.ErrorContains(t, err, "many:100001: more than 100000 prefixes of a family")
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

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
	r := p.policy.Rules[1]
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
	require.Equal(t, inTOML.policy.Rules[0], r)
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
		p.refreshPrefixFiles(acc)
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
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), p.policy.Rules[0].SrcPrefixes)
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
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), p.policy.Rules[0].SrcPrefixes)
	n, errText = fields()
	require.Equal(t, int64(2), n)
	require.Equal(t, strings.TrimPrefix(want, `rule "list": `), errText)
	require.Empty(t, refresh().Errors, "reported once per change")

	require.NoError(t, os.Remove(path))
	acc = refresh()
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], "no such file or directory; the last good prefixes stay in force")
	require.Empty(t, refresh().Errors, "reported once")
	require.Equal(t, mustPrefixes("198.51.100.0/24", "203.0.113.0/24"), p.policy.Rules[0].SrcPrefixes)
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

// TestSwapMemoryBound: reading a changed list tightens the Go memory limit
// until the swap is done, never above a limit already set, and restores it.
func TestSwapMemoryBound(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	dir := t.TempDir()
	path := filepath.Join(dir, "drop.txt")
	writeList(t, path, "203.0.113.0/24")
	p := fileRulePlugin(Rule{Name: "list", Action: "drop", SrcPrefixFile: []string{path}})
	require.NoError(t, p.Init())
	writeList(t, path, "198.51.100.0/24")
	p.refreshPrefixFiles(&testutil.Accumulator{})
	bound := debug.SetMemoryLimit(-1)
	require.Less(t, bound, before, "a limit while the set is swapped in")
	p.files.releaseMemory()
	require.Equal(t, before, debug.SetMemoryLimit(-1), "restored")

	debug.SetMemoryLimit(1 << 20)
	writeList(t, path, "192.0.2.0/24")
	p.refreshPrefixFiles(&testutil.Accumulator{})
	require.Equal(t, int64(1<<20), debug.SetMemoryLimit(-1), "a lower limit is kept")
	p.files.releaseMemory()
	require.Equal(t, int64(1<<20), debug.SetMemoryLimit(-1))
}

// hostList writes n IPv4 host addresses from base on, one a line.
func hostList(t *testing.T, path string, base byte, n int) {
	t.Helper()
	lines := make([]string, n)
	for i := range lines {
		lines[i] = netip.AddrFrom4([4]byte{base, byte(i >> 16), byte(i >> 8), byte(i)}).String()
	}
	writeList(t, path, lines...)
}

// TestPrefixFileTotals: the rules and their files hold at most 100,000
// prefixes per family together; more is an Init error, and later a
// refused change that keeps the set in force.
func TestPrefixFileTotals(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	hostList(t, a, 10, 60_000)
	hostList(t, b, 11, 50_000)
	p := fileRulePlugin(
		Rule{Name: "a", Action: "drop", SrcPrefixFile: []string{a}},
		Rule{Name: "b", Action: "drop", DstPrefixFile: []string{b}},
	)
	require.EqualError(t, p.Init(), `rule "b": dst_prefix_file: with `+b+` the prefix files list 110000 IPv4 prefixes (repeats counted); at most 100000 per family fit: shorten or merge the lists`)

	hostList(t, b, 11, 40_000)
	require.NoError(t, p.Init())
	gen := p.files.gen
	hostList(t, b, 11, 40_001)
	acc := &testutil.Accumulator{}
	p.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Len(t, acc.Errors, 1)
	require.EqualError(t, acc.Errors[0], `rule "b": dst_prefix_file: with `+b+` the prefix files list 100001 IPv4 prefixes (repeats counted); at most 100000 per family fit: shorten or merge the lists; the last good prefixes stay in force`)
	require.Equal(t, gen, p.files.gen)
	require.Len(t, p.policy.Rules[1].DstPrefixes, 40_000)
	f := p.files.Fields(1, p.files.gen, nil)
	n, errText := f.prefixes, f.err
	require.Equal(t, int64(40_000), n)
	require.Contains(t, errText, "100001 IPv4 prefixes")

	// Files within the bound, with the rules' own prefixes beyond it.
	hostList(t, a, 10, bpf.MaxPrefixes)
	p = fileRulePlugin(Rule{Name: "a", Action: "drop", SrcPrefix: []string{"192.0.2.0/24"}, SrcPrefixFile: []string{a}})
	require.EqualError(t, p.Init(), "rule: the rules and their prefix files list 100001 IPv4 prefixes; at most 100000 per family fit: shorten the lists, or merge adjacent prefixes")
}

// TestRuleSeriesFileFields: the prefix file fields are integers and a
// string, on rules with files only, error only while a file fails.
func TestRuleSeriesFileFields(t *testing.T) {
	for _, c := range []struct {
		series RuleSeries
		want   map[string]any
	}{
		{RuleSeries{Packets: 3, Bytes: 180}, map[string]any{"packets": uint64(3), "bytes": uint64(180)}},
		{RuleSeries{Packets: 3, Bytes: 180, Files: true, Prefixes: 1437, Loaded: 1796137694},
			map[string]any{"packets": uint64(3), "bytes": uint64(180), "prefixes": int64(1437), "loaded": int64(1796137694), "added": int64(0), "removed": int64(0)}},
		{RuleSeries{Files: true, Prefixes: 2, Loaded: 1796137694, Added: 3, Removed: 1, Error: "src_prefix_file: /l.txt:4: bad"},
			map[string]any{"packets": uint64(0), "bytes": uint64(0), "prefixes": int64(2), "loaded": int64(1796137694), "added": int64(3), "removed": int64(1), "error": "src_prefix_file: /l.txt:4: bad"}},
	} {
		got := map[string]any{}
		c.series.PutFields(got)
		require.Equal(t, c.want, got)
	}
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

// TestPrefixFileListedTotal: the files together list at most MaxPrefixes
// of a family, repeats counted; reading stops at the file that passes it
// (the malformed file after it is never read), at Init and at a refresh,
// where the set in force stays.
func TestPrefixFileListedTotal(t *testing.T) {
	dir := t.TempDir()
	a, b, bad := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt"), filepath.Join(dir, "bad.txt")
	half := bpf.MaxPrefixes/2 + 1
	writeList(t, a, hostAddrs(0, half)...)
	writeList(t, b, hostAddrs(0, half)...) // the same prefixes: the union would fit
	writeList(t, bad, "not a prefix")
	err := fileRulePlugin(Rule{Name: "lists", Action: "drop", SrcPrefixFile: []string{a, b, bad}}).Init()
	require.EqualError(t, err, fmt.Sprintf(`rule "lists": src_prefix_file: with %s the prefix files list %d IPv4 prefixes (repeats counted); at most %d per family fit: shorten or merge the lists`, b, 2*half, bpf.MaxPrefixes))

	writeList(t, b, "2001:db8::/32")
	p := fileRulePlugin(Rule{Name: "lists", Action: "drop", SrcPrefixFile: []string{a, b}})
	require.NoError(t, p.Init())
	writeList(t, b, hostAddrs(half, half)...)
	acc := &testutil.Accumulator{}
	p.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Len(t, acc.Errors, 1)
	require.EqualError(t, acc.Errors[0], fmt.Sprintf(`rule "lists": src_prefix_file: with %s the prefix files list %d IPv4 prefixes (repeats counted); at most %d per family fit: shorten or merge the lists; the last good prefixes stay in force`, b, 2*half, bpf.MaxPrefixes))
	require.Len(t, p.policy.Rules[0].SrcPrefixes, half+1, "the set in force stays")
	f := p.files.Fields(0, p.files.gen, nil)
	n, errText := f.prefixes, f.err
	require.Equal(t, int64(half+1), n)
	require.Contains(t, errText, "repeats counted")
}

// TestPrefixFileChangeCounts: a change of a rule's files is counted as
// the prefixes the rule's set gained and lost, repeats across its files
// and its own src_prefix counted once, and logged with the total once
// every program holds it; the fields are zero before any change.
func TestPrefixFileChangeCounts(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	writeList(t, a, hostAddrs(0, 998)...)
	writeList(t, b, "2001:db8::/32")
	log := &testutil.CaptureLogger{}
	p := fileRulePlugin(Rule{Name: "x", Action: "drop", SrcPrefix: []string{"192.0.2.0/24"}, SrcPrefixFile: []string{a, b}})
	p.Log = log
	require.NoError(t, p.Init())
	f := p.files.Fields(0, p.files.gen, nil)
	require.Equal(t, [3]int64{1000, 0, 0}, [3]int64{f.prefixes, f.added, f.removed}, "no change yet")

	// a: 10.0.0.0 gone, 10.0.3.230-232 new, and 192.0.2.0/24, which the
	// rule has already from src_prefix.
	writeList(t, a, slices.Concat(hostAddrs(1, 1000), []string{"192.0.2.0/24"})...)
	acc := &testutil.Accumulator{}
	p.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Empty(t, acc.Errors)
	f = p.files.Fields(0, p.files.gen, nil)
	require.Equal(t, [3]int64{1002, 3, 1}, [3]int64{f.prefixes, f.added, f.removed})
	old := p.files.Fields(0, p.files.gen-1, errors.New("load XDP program: too many open files"))
	require.Equal(t, [3]int64{1000, 0, 0}, [3]int64{old.prefixes, old.added, old.removed}, "a program of the generation before holds the set before")
	require.Equal(t, "the changed prefixes are not in force on this interface: load XDP program: too many open files", old.err)

	require.Empty(t, log.Messages(), "not logged while a program holds the set before")
	p.files.noteInForce(p.files.gen - 1)
	require.Empty(t, log.Messages())
	p.files.noteInForce(p.files.gen)
	var lines []string
	for _, m := range log.Messages() {
		lines = append(lines, m.Text)
	}
	require.Equal(t, []string{`rule "x": file "` + a + `": +3 −1, 1,002 in force`}, lines)
	require.Len(t, p.files.rules[0].sets, 1, "the set no program holds is forgotten")
	p.files.noteInForce(p.files.gen)
	require.Len(t, log.Messages(), 1, "logged once")
}

// TestDiffPrefixes counts what a sorted set gained and lost.
func TestDiffPrefixes(t *testing.T) {
	for _, c := range []struct {
		cur, next      []netip.Prefix
		added, removed int
	}{
		{nil, nil, 0, 0},
		{nil, mustPrefixes("192.0.2.0/24"), 1, 0},
		{mustPrefixes("192.0.2.0/24"), nil, 0, 1},
		{mustPrefixes("192.0.2.0/24", "198.51.100.0/24"), mustPrefixes("192.0.2.0/25", "198.51.100.0/24", "2001:db8::/32"), 2, 1},
		{mustPrefixes("10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"), mustPrefixes("10.0.0.2/32"), 0, 2},
	} {
		added, removed := diffPrefixes(uniquePrefixes(c.cur), uniquePrefixes(c.next))
		require.Equal(t, [2]int{c.added, c.removed}, [2]int{added, removed}, "%v -> %v", c.cur, c.next)
	}
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
	before := p.policy
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
	require.Equal(t, mustPrefixes("203.0.113.0/24"), p.policy.Rules[1].SrcPrefixes, "the plugin's policy changes only when the plugin puts next in force")
	old := p.files.Fields(1, gen, nil)
	require.Equal(t, int64(1), old.prefixes, "a program of the generation before holds the set before")
	require.Equal(t, "the changed prefixes are not in force on this interface: not swapped in yet", old.err)
}
