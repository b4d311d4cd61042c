package xdp_drop

import (
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
)

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
	p.links.refreshPrefixFiles(acc)
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
