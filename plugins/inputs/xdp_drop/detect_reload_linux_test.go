//go:build linux

package xdp_drop

import (
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestDetectReloadKeepsBans: a detection's ban in force crosses a reload
// (handed over with the programs): the successor drops the source, takes
// the ban back (active, its expiry an event), and a ban of the source
// after it counts as a second offence, twice as long.
func TestDetectReloadKeepsBans(t *testing.T) {
	ns := testns.New(t)
	cfg := func() *XDPDrop {
		return detectPlugin(&DetectConfig{PPS: 1000, Duration: config.Duration(5 * time.Second), DryRun: enforce(), UnverifiedAction: "drop"}, nil)
	}
	a := cfg()
	require.Empty(t, startPlugin(t, ns, a).Errors)
	heavy := []string{"198.51.100.7"}
	flood(t, ns, heavy, 10_000, func() bool { return banCounter(t, a, bpf.BanDrop) > 0 })

	dir := handOverInProcess(t, ns, a)
	b := cfg()
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	sendBanFlows(t, ns, banFlow{"198.51.100.7", 500, 0}, banFlow{"203.0.113.1", 300, 300})
	ban, _ := gatherDetect(t, ns, b)
	require.Equal(t, int64(1), field(ban.Fields(), FieldActive), "the ban handed over is the successor's")

	var events []telegraf.Metric
	deadline := time.Now().Add(testns.Hang)
	for len(events) == 0 {
		require.True(t, time.Now().Before(deadline), "the ban handed over did not expire")
		_, events = gatherDetect(t, ns, b)
		time.Sleep(100 * time.Millisecond)
	}
	require.Len(t, events, 1)
	require.Equal(t, EventExpire, events[0].Tags()[TagEvent])
	require.Equal(t, "198.51.100.7/32", events[0].Fields()[FieldSource])
	require.Equal(t, int64(1), events[0].Fields()[FieldOffence])

	flood(t, ns, heavy, 10_000, func() bool {
		_, ev := gatherDetect(t, ns, b)
		events = append(events, ev...)
		return len(events) > 1
	})
	require.Len(t, events, 2)
	e := events[1]
	require.Equal(t, EventBan, e.Tags()[TagEvent])
	require.Equal(t, int64(2), e.Fields()[FieldOffence], "a second offence across the reload")
	require.GreaterOrEqual(t, e.Fields()[FieldDurationS], int64(10))
}

// TestDetectReloadKeepsHistory: the offence history crosses a reload with
// the bans, those ended included: a source banned twice (its second ban
// twice as long), its ban ended, is banned after a reload as a third
// offence, four times the first duration.
func TestDetectReloadKeepsHistory(t *testing.T) {
	ns := testns.New(t)
	cfg := func() *XDPDrop {
		return detectPlugin(&DetectConfig{
			PPS: 1000, For: config.Duration(time.Second), Duration: config.Duration(time.Second),
			MaxDuration: config.Duration(time.Minute), DryRun: enforce(), UnverifiedAction: "drop",
		}, nil)
	}
	heavy := []string{"198.51.100.7"}
	a := cfg()
	require.Empty(t, startPlugin(t, ns, a).Errors)
	for offence := int64(1); offence <= 2; offence++ {
		ban := banAndExpire(t, ns, a, heavy)
		require.Equal(t, offence, ban.Fields()[FieldOffence])
		require.Equal(t, offence, ban.Fields()[FieldDurationS], "1 s, then twice that")
	}

	dir := handOverInProcess(t, ns, a)
	b := cfg()
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	ban, _ := gatherDetect(t, ns, b)
	require.Equal(t, int64(0), field(ban.Fields(), FieldActive), "no ban in force crossed the reload")

	e := banAndExpire(t, ns, b, heavy)
	require.Equal(t, int64(3), e.Fields()[FieldOffence], "a third offence across the reload")
	require.Equal(t, int64(4), e.Fields()[FieldDurationS], "four times the first duration")
}

// banAndExpire floods p with srcs until detection bans them, then waits
// for the ban's end, and returns the ban's event.
func banAndExpire(t *testing.T, ns *testns.NS, p *XDPDrop, srcs []string) telegraf.Metric {
	t.Helper()
	var events []telegraf.Metric
	flood(t, ns, srcs, 10_000, func() bool {
		_, ev := gatherDetect(t, ns, p)
		events = append(events, ev...)
		return len(events) > 0
	})
	require.Len(t, events, 1)
	require.Equal(t, EventBan, events[0].Tags()[TagEvent])
	deadline := time.Now().Add(testns.Hang)
	for len(events) == 1 {
		require.True(t, time.Now().Before(deadline), "the ban did not expire")
		time.Sleep(100 * time.Millisecond)
		_, ev := gatherDetect(t, ns, p)
		events = append(events, ev...)
	}
	require.Len(t, events, 2)
	require.Equal(t, EventExpire, events[1].Tags()[TagEvent])
	return events[0]
}
