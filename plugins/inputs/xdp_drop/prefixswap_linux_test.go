//go:build linux

package xdp_drop

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// obstructFDs lowers the soft RLIMIT_NOFILE of the process so that exactly
// free more descriptors can be opened (the kernel gives the lowest free
// number, and none at or over the limit), and returns what restores it.
func obstructFDs(t *testing.T, free int) (restore func()) {
	t.Helper()
	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	// fcntl opens nothing: listing /proc/self/fd would count its own.
	fd := 0
	for left := free; ; fd++ {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if !errors.Is(err, unix.EBADF) {
			continue
		}
		if left == 0 {
			break
		}
		left--
	}
	low := lim
	low.Cur = uint64(fd)
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	return func() { require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)) }
}

// gatherObstructed gathers with only free descriptors left to open.
func gatherObstructed(t *testing.T, ns *testns.NS, p *XDPDrop, free int) *testutil.Accumulator {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error {
		restore := obstructFDs(t, free)
		defer restore()
		return p.Gather(acc)
	})
	return acc
}

// gatherObstructedUntil gathers with one descriptor left, too few for any
// swap, until the xdp_drop points count want packets in all.
func gatherObstructedUntil(t *testing.T, ns *testns.NS, p *XDPDrop, want uint64) *testutil.Accumulator {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for {
		acc := gatherObstructed(t, ns, p, 1)
		if total := packetsOfAll(acc); total >= want || time.Now().After(deadline) {
			return acc
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func packetsOfAll(acc *testutil.Accumulator) uint64 {
	var total uint64
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementCounters {
			v, _ := m.GetField("packets")
			total += v.(uint64)
		}
	}
	return total
}

// rulePointOn is the fields of the rule's point on an interface.
func rulePointOn(t *testing.T, acc *testutil.Accumulator, iface, rule string) map[string]any {
	t.Helper()
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementRule && m.Tags()["rule"] == rule && m.Tags()["interface"] == iface {
			return m.Fields()
		}
	}
	t.Fatalf("no xdp_drop_rule point for %q on %s", rule, iface)
	return nil
}

// classPacketsOn is classPackets of one interface's points.
func classPacketsOn(acc *testutil.Accumulator, iface string) map[string]uint64 {
	only := &testutil.Accumulator{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Tags()["interface"] == iface {
			only.AddMetric(m)
		}
	}
	return classPackets(only)
}

func sendTo(t *testing.T, ns *testns.NS, peerIdx int, frame []byte, n int) {
	t.Helper()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.Send(peerIdx, frame, n) }))
}

func infoLines(log *testutil.CaptureLogger) string {
	var lines []string
	for _, m := range log.Messages() {
		lines = append(lines, m.Text)
	}
	return strings.Join(lines, "\n")
}

// TestPrefixFileSwapFails: a changed list whose swap the kernel refuses
// (out of descriptors: map creation fails with EMFILE) leaves the old list
// in force, and the rule's points say so: the old prefixes and loaded, the
// old change, and an error, gather after gather; frames from the new list's
// sources pass. Once descriptors are free again the next gather swaps: the
// error clears, prefixes, loaded and the change move forward, the change
// is logged, and those frames are dropped.
func TestPrefixFileSwapFails(t *testing.T) {
	ns := testns.New(t)
	list := t.TempDir() + "/drop.txt"
	writeList(t, list, listV1...)
	log := &testutil.CaptureLogger{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: []Rule{
		{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}},
	}, Log: log})
	require.Empty(t, startPlugin(t, ns, p).Errors)
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	before := rulePoint(t, acc, "blocklist")
	require.Equal(t, int64(3), before["prefixes"])
	require.Equal(t, []any{int64(0), int64(0)}, []any{before["added"], before["removed"]}, "no change yet")
	oldID, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)

	time.Sleep(1100 * time.Millisecond) // loaded, in seconds, would move
	writeList(t, list, listV2...)
	// One descriptor: the list is read through it, then the swap's first
	// map creation takes it and the next fails.
	acc = gatherObstructed(t, ns, p, 1)
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], `interface "xdpt0": put the changed prefix files in force: `)
	require.ErrorContains(t, acc.Errors[0], "too many open files")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, oldID, id, "the kernel kept the old program")

	sendTo(t, ns, ns.PeerIdx, newV4, 100)
	acc = gatherObstructedUntil(t, ns, p, 100)
	got := classPacketsOn(acc, testns.Dev)
	require.Equal(t, uint64(100), got["ipv4/tcp/pass"], "the new list's source passes: the old list is in force")
	require.Zero(t, got["rule/blocklist"])
	failed := rulePoint(t, acc, "blocklist")
	require.Equal(t, before["prefixes"], failed["prefixes"], "the old list's prefixes")
	require.Equal(t, before["loaded"], failed["loaded"], "loaded stands still")
	require.Equal(t, []any{int64(0), int64(0)}, []any{failed["added"], failed["removed"]}, "the old list's change")
	require.Contains(t, failed["error"], "the changed prefixes are not in force on this interface: ")
	require.Contains(t, failed["error"], "too many open files")
	require.NotContains(t, infoLines(log), "in force\n", "the change is not logged as in force")

	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	id, err = ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotEqual(t, oldID, id, "swapped")
	swapped := rulePoint(t, acc, "blocklist")
	require.NotContains(t, swapped, "error")
	require.Equal(t, int64(4), swapped["prefixes"])
	require.Greater(t, swapped["loaded"], before["loaded"])
	require.Equal(t, []any{int64(2), int64(1)}, []any{swapped["added"], swapped["removed"]})
	require.Contains(t, infoLines(log), `rule "blocklist": file "`+list+`": +2 −1, 4 in force`)

	sendTo(t, ns, ns.PeerIdx, newV4, 100)
	got = classPacketsOn(gatherUntil(t, ns, p, 200), testns.Dev)
	require.Equal(t, uint64(100), got["ipv4/tcp/pass"], "no more passed")
	require.Equal(t, uint64(100), got["ipv4/tcp/drop"], "dropped by the new list")
	require.Equal(t, uint64(100), got["rule/blocklist"])
}

// TestPrefixFileSwapFailsOnOneInterface: when the changed list is in force
// on one interface and not on another, each interface's points report the
// list its program holds: the new one where it is, the old one with the
// error where it is not; the change is logged once it is in force on
// both. The split is made by the kernel: descriptors are limited so that
// an interface that appears takes the last of them to attach (with the new
// list), and the swap of the interface attached before finds none.
func TestPrefixFileSwapFailsOnOneInterface(t *testing.T) {
	ns := testns.New(t)
	list := t.TempDir() + "/drop.txt"
	writeList(t, list, listV1...)
	log := &testutil.CaptureLogger{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev, "xdpm0"}, Rules: []Rule{
		{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}},
	}, Log: log})
	startPlugin(t, ns, p) // xdpm0 is not there yet
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	before := rulePointOn(t, acc, testns.Dev, "blocklist")
	oldID, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)

	_, peerIdx, err := ns.AddVeth("xdpm0", "xdpm0p")
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // loaded, in seconds, would move
	writeList(t, list, listV2...)
	// The fewest descriptors that let xdpm0 attach: what is left is too
	// few for a swap.
	split := false
	for free := 1; free <= 64 && !split; free++ {
		acc = gatherObstructed(t, ns, p, free)
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, oldID, id, "with %d descriptors free: %s swapped before xdpm0 could attach", free, testns.Dev)
		split = linkPoint(t, acc, "xdpm0")["attached"] == true
	}
	require.True(t, split, "xdpm0 never attached")

	old, fresh := rulePointOn(t, acc, testns.Dev, "blocklist"), rulePointOn(t, acc, "xdpm0", "blocklist")
	require.Equal(t, before["prefixes"], old["prefixes"], "%s: the old list", testns.Dev)
	require.Equal(t, before["loaded"], old["loaded"], "%s: loaded stands still", testns.Dev)
	require.Contains(t, old["error"], "the changed prefixes are not in force on this interface: ")
	require.Equal(t, int64(4), fresh["prefixes"], "xdpm0: the new list")
	require.Greater(t, fresh["loaded"], before["loaded"])
	require.Equal(t, []any{int64(2), int64(1)}, []any{fresh["added"], fresh["removed"]}, "xdpm0: the change that made its list")
	require.NotContains(t, fresh, "error")

	sendTo(t, ns, ns.PeerIdx, newV4, 100)
	sendTo(t, ns, peerIdx, newV4, 100)
	acc = gatherObstructedUntil(t, ns, p, 200)
	require.Equal(t, uint64(100), classPacketsOn(acc, testns.Dev)["ipv4/tcp/pass"], "%s: the old list in force", testns.Dev)
	require.Equal(t, uint64(100), classPacketsOn(acc, "xdpm0")["ipv4/tcp/drop"], "xdpm0: the new list in force")
	require.Contains(t, rulePointOn(t, acc, testns.Dev, "blocklist")["error"], "not in force on this interface")
	require.NotContains(t, infoLines(log), "in force\n", "not logged while one interface holds the old list")

	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	for _, iface := range []string{testns.Dev, "xdpm0"} {
		f := rulePointOn(t, acc, iface, "blocklist")
		require.NotContains(t, f, "error", iface)
		require.Equal(t, []any{int64(4), int64(2), int64(1)}, []any{f["prefixes"], f["added"], f["removed"]}, iface)
	}
	require.Equal(t, 1, strings.Count(infoLines(log), `rule "blocklist": file "`+list+`": +2 −1, 4 in force`))
	sendTo(t, ns, ns.PeerIdx, newV4, 100)
	acc = gatherUntil(t, ns, p, 300)
	require.Equal(t, uint64(100), classPacketsOn(acc, testns.Dev)["ipv4/tcp/drop"], "%s: swapped", testns.Dev)
	require.Equal(t, uint64(100), classPacketsOn(acc, testns.Dev)["ipv4/tcp/pass"])
}
