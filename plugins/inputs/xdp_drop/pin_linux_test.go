//go:build linux

package xdp_drop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// pinDir returns a directory, not yet created, on a BPF filesystem of the
// test's own (see testns.BPFFS), which goes with its pins when the test ends.
func pinDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(testns.BPFFS(t, 0o700), "xdp_drop")
}

func runOnce(t *testing.T, ns *testns.NS, p *XDPDrop, flows []traffic.Flow, want uint64) *testutil.Accumulator {
	t.Helper()
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	require.Empty(t, acc.Errors)
	send(t, ns, flows)
	acc = gatherUntil(t, ns, p, want)
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	return acc
}

// TestPinnedCountersSurviveRestart: with pin_path a restarted plugin
// continues the same counters exactly; a changed policy starts anew rather
// than mixing counts whose actions differ, and the log says which happened.
func TestPinnedCountersSurviveRestart(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	mix := traffic.Mix()
	n := uint64(traffic.Total(mix))
	log := &captureLog{}
	conf := func(drop ...any) *XDPDrop {
		log.infos = nil
		return withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: drop, PinPath: dir, Log: log})
	}
	pinLog := func(note string) string {
		return fmt.Sprintf("interface %q: %s (%s)", testns.Dev, note, filepath.Join(dir, testns.Dev))
	}

	acc := runOnce(t, ns, conf("udp"), mix, n)
	require.Equal(t, n, packetsOf(acc, testns.Dev))
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "without keep_attached the attachment ends with Stop")

	acc = runOnce(t, ns, conf("udp"), mix, 2*n)
	require.Equal(t, 2*n, packetsOf(acc, testns.Dev), "the restart continues the pinned counters")
	require.Contains(t, log.infos, pinLog("continuing pinned counters"))
	want := expectedMetrics(testns.Dev, append(append([]traffic.Flow{}, mix...), mix...), func(c bpf.Class) string {
		if p, ok := c.Protocol(); ok && p == 17 {
			return "drop"
		}
		return "pass"
	})
	var got []telegraf.Metric
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == "xdp_drop" {
			got = append(got, m)
		}
	}
	testutil.RequireMetricsEqual(t, want, got, testutil.IgnoreTime(), testutil.SortMetrics())

	acc = runOnce(t, ns, conf("tcp"), mix, n)
	require.Equal(t, n, packetsOf(acc, testns.Dev), "a changed policy starts from zero")
	require.Contains(t, log.infos, pinLog("counters pinned under another policy or program version were dropped; counting starts from zero"),
		"the log says the pinned counters were replaced")
	pins, err := filepath.Glob(filepath.Join(dir, testns.Dev, "counters_*"))
	require.NoError(t, err)
	require.Len(t, pins, 1, "the old policy's counters are unpinned")
}

// TestPinnedRuleCountersSurviveRestart: with rules, the rule counters are
// pinned beside the counters and continue with them, so that a class whose
// frames a rule gave the other action (TCP, dropped by a rule, passed by
// the drop list) keeps both its actions exact; without rules, nothing but
// the counters is pinned.
func TestPinnedRuleCountersSurviveRestart(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	mix := traffic.Mix()
	n := uint64(traffic.Total(mix))
	log := &captureLog{}
	conf := func(rules ...Rule) *XDPDrop {
		log.infos = nil
		return withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"udp"}, Rules: rules, PinPath: dir, Log: log})
	}
	tcp := Rule{Name: "tcp", Action: "drop", Protocol: []any{"tcp"}}
	pins := func(pattern string) []string {
		got, err := filepath.Glob(filepath.Join(dir, testns.Dev, pattern))
		require.NoError(t, err)
		return got
	}

	runOnce(t, ns, conf(tcp), mix, n)
	require.Len(t, pins("counters_*"), 1)
	require.Len(t, pins("rule_counters_*"), 1)
	acc := runOnce(t, ns, conf(tcp), mix, 2*n)
	require.Contains(t, log.infos, fmt.Sprintf("interface %q: continuing pinned counters (%s)", testns.Dev, filepath.Join(dir, testns.Dev)))
	want := expectedMetrics(testns.Dev, append(append([]traffic.Flow{}, mix...), mix...), func(c bpf.Class) string {
		if p, ok := c.Protocol(); ok && (p == 17 || p == 6) {
			return "drop"
		}
		return "pass"
	})
	var got []telegraf.Metric
	var ruled uint64
	for _, m := range acc.GetTelegrafMetrics() {
		switch m.Name() {
		case "xdp_drop":
			got = append(got, m)
		case "xdp_drop_rule":
			p, _ := m.GetField("packets")
			ruled = p.(uint64)
		}
	}
	testutil.RequireMetricsEqual(t, want, got, testutil.IgnoreTime(), testutil.SortMetrics())
	var tcpFrames uint64
	for _, f := range mix {
		if p, ok := f.Class.Protocol(); ok && p == 6 {
			tcpFrames += uint64(f.Count)
		}
	}
	require.Equal(t, 2*tcpFrames, ruled, "the rule's counter continues")

	acc = runOnce(t, ns, conf(), mix, n)
	require.Equal(t, n, packetsOf(acc, testns.Dev), "without the rule: counting starts anew")
	require.Len(t, pins("counters_*"), 1)
	require.Empty(t, pins("rule_counters_*"), "no rules, no rule counters pinned")
}

// TestKeepAttached: with keep_attached the program stays attached after
// Stop and keeps dropping and counting; the next run takes the attachment
// over without a gap; turning keep_attached off releases it.
func TestKeepAttached(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	mix := traffic.Mix()
	n := uint64(traffic.Total(mix))
	kept := func() *XDPDrop {
		return withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, PinPath: dir, KeepAttached: true, Log: testutil.Logger{}})
	}

	runOnce(t, ns, kept(), mix, n)
	id1, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id1, "still attached after Stop")
	link1 := keptLinkID(t, dir)

	send(t, ns, mix) // while no agent runs: still dropped and counted
	// replace = true must not detach our own kept link: no gap.
	again := kept()
	again.Replace = true
	acc := runOnce(t, ns, again, mix, 3*n)
	require.Equal(t, 3*n, packetsOf(acc, testns.Dev))
	id2, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id2)
	require.NotEqual(t, id1, id2, "the new run's program took the link over")
	require.Equal(t, link1, keptLinkID(t, dir), "the same link, updated in place: no moment unfiltered")

	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, PinPath: dir, Log: testutil.Logger{}})
	acc = runOnce(t, ns, p, mix, 4*n)
	require.Equal(t, 4*n, packetsOf(acc, testns.Dev))
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "keep_attached off: the kept link is released and Stop detaches")
	_, err = os.Stat(filepath.Join(dir, testns.Dev, "link"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func keptLinkID(t *testing.T, dir string) link.ID {
	t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(dir, testns.Dev, "link"), nil)
	require.NoError(t, err)
	defer l.Close()
	info, err := l.Info()
	require.NoError(t, err)
	return info.ID
}

// TestPinnedCountersPolicyAndLayout: per_queue counters survive a restart
// too, and under dry_run a changed drop list starts new counters, since the
// would_drop and pass actions of the old counts no longer hold.
func TestPinnedCountersPolicyAndLayout(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	mix := traffic.Mix()
	n := uint64(traffic.Total(mix))
	conf := func(perQueue bool, drop ...any) *XDPDrop {
		return withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: drop, DryRun: true, PerQueue: perQueue, PinPath: dir, Log: testutil.Logger{}})
	}
	runOnce(t, ns, conf(true, "udp"), mix, n)
	acc := runOnce(t, ns, conf(true, "udp"), mix, 2*n)
	require.Equal(t, 2*n, packetsOf(acc, testns.Dev), "per_queue counters continue")

	runOnce(t, ns, conf(false, "udp"), mix, n)
	acc = runOnce(t, ns, conf(false, "tcp"), mix, n)
	require.Equal(t, n, packetsOf(acc, testns.Dev), "another drop list under dry_run starts anew")
}

// TestPinsGoWithTheInterface: when a pinned interface is removed its pins
// go too, so one recreated under the same name starts from zero.
func TestPinsGoWithTheInterface(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev, "xdpt2"}, Drop: []any{"all"}, PinPath: dir, Log: testutil.Logger{}})
	startPlugin(t, ns, p)
	_, err = os.Stat(filepath.Join(dir, "xdpt2"))
	require.NoError(t, err)

	require.NoError(t, ns.DelLink("xdpt2"))
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	_, err = os.Stat(filepath.Join(dir, "xdpt2"))
	require.ErrorIs(t, err, os.ErrNotExist, "pins of a removed interface are removed")
	_, err = os.Stat(filepath.Join(dir, testns.Dev))
	require.NoError(t, err, "the other interface keeps its pins")
}

// TestPinPathNotBPFFS: a pin_path that cannot hold pins does not leave the
// interface unfiltered: it is attached without pins, and the warning says
// what to fix.
func TestPinPathNotBPFFS(t *testing.T) {
	ns := testns.New(t)
	dir := t.TempDir()
	log := &captureLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, PinPath: dir, Log: log})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id, "the drop policy is enforced without pins")
	warnings := strings.Join(log.warnings, "\n")
	require.Contains(t, warnings, `interface "`+testns.Dev+`": attaching without pins, so counters restart at every restart: pin_path unusable: `+dir+" is not on a BPF filesystem")
	require.Contains(t, warnings, "mount -t bpf bpf")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing pinned")
}
