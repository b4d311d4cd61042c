package xdp_drop

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

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
	p.links.refreshPrefixFiles(&testutil.Accumulator{})
	bound := debug.SetMemoryLimit(-1)
	require.Less(t, bound, before, "a limit while the set is swapped in")
	p.files.releaseMemory()
	require.Equal(t, before, debug.SetMemoryLimit(-1), "restored")

	debug.SetMemoryLimit(1 << 20)
	writeList(t, path, "192.0.2.0/24")
	p.links.refreshPrefixFiles(&testutil.Accumulator{})
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
	p.links.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Len(t, acc.Errors, 1)
	require.EqualError(t, acc.Errors[0], `rule "b": dst_prefix_file: with `+b+` the prefix files list 100001 IPv4 prefixes (repeats counted); at most 100000 per family fit: shorten or merge the lists; the last good prefixes stay in force`)
	require.Equal(t, gen, p.files.gen)
	require.Len(t, p.links.policy.Rules[1].DstPrefixes, 40_000)
	f := p.files.Fields(1, p.files.gen, nil)
	n, errText := f.prefixes, f.err
	require.Equal(t, int64(40_000), n)
	require.Contains(t, errText, "100001 IPv4 prefixes")

	// Files within the bound, with the rules' own prefixes beyond it.
	hostList(t, a, 10, bpf.MaxPrefixes)
	p = fileRulePlugin(Rule{Name: "a", Action: "drop", SrcPrefix: []string{"192.0.2.0/24"}, SrcPrefixFile: []string{a}})
	require.EqualError(t, p.Init(), "rule: the rules and their prefix files list 100001 IPv4 prefixes; at most 100000 per family fit: shorten the lists, or merge adjacent prefixes")
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
	p.links.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Len(t, acc.Errors, 1)
	require.EqualError(t, acc.Errors[0], fmt.Sprintf(`rule "lists": src_prefix_file: with %s the prefix files list %d IPv4 prefixes (repeats counted); at most %d per family fit: shorten or merge the lists; the last good prefixes stay in force`, b, 2*half, bpf.MaxPrefixes))
	require.Len(t, p.links.policy.Rules[0].SrcPrefixes, half+1, "the set in force stays")
	f := p.files.Fields(0, p.files.gen, nil)
	n, errText := f.prefixes, f.err
	require.Equal(t, int64(half+1), n)
	require.Contains(t, errText, "repeats counted")
}
