//go:build linux

package xdp_drop

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// TestGatherMatchesReference checks a gather point for point, in order,
// against a straightforward mapping of the same counters: two interfaces
// with rules, one of them with traffic from several CPUs into several RX
// queues, under each split view.
func TestGatherMatchesReference(t *testing.T) {
	const queues = 4
	ns := testns.New(t)
	_, peerIdx, err := ns.AddVethQueues("xdpq0", "xdpq1", queues)
	require.NoError(t, err)
	p := withDefaults(withDefaults(&XDPDrop{
		Interfaces: []string{"xdpq0", testns.Dev}, Drop: []any{"udp", "icmp"}, Rules: exampleRules(),
		PerQueue: true, Log: testutil.Logger{},
	}))
	require.Empty(t, startPlugin(t, ns, p).Errors)

	// The rule flows and an ICMP flow no rule passes: every view has classes
	// that only passed (tcp), only dropped (icmp) and did both (udp).
	icmp := ipFrame("203.0.113.5", "198.51.100.9", frames.ProtoICMP, 1, 2)
	ruled := []traffic.Flow{{Name: "icmp", Frame: icmp, Count: 9, Class: bpf.IPv4Class(frames.ProtoICMP)}}
	for _, f := range ruleFlows() {
		ruled = append(ruled, f.Flow)
	}
	send(t, ns, ruled)
	total := traffic.Total(ruled)
	mixed := slices.Concat(ruled, traffic.Mix())
	var cpus, rounds []int
	for i, cpu := range allowedCPUs(t) {
		cpus, rounds = append(cpus, cpu), append(rounds, i+1)
		total += (i + 1) * traffic.Total(mixed)
	}
	sendFromCPUs(t, ns, peerIdx, cpus, rounds, mixed)
	gatherUntil(t, ns, p, uint64(total))

	for _, view := range []struct{ perQueue, perCPU bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("per_queue=%v,per_cpu=%v", view.perQueue, view.perCPU), func(t *testing.T) {
			p.PerQueue, p.PerCPU = view.perQueue, view.perCPU
			acc := &testutil.Accumulator{}
			inNS(t, ns, p, func() error { return p.Gather(acc) })
			require.Empty(t, acc.Errors)
			got := acc.GetTelegrafMetrics()
			want := referencePoints(t, p)
			require.Greater(t, len(want), 2*(len(p.Rules)+1), "points beyond the rule and link points")
			testutil.RequireMetricsEqual(t, want, got, testutil.IgnoreTime())
			for _, m := range got {
				require.Equal(t, got[0].Time(), m.Time(), "one timestamp for every point of a gather")
			}
		})
	}
}

// referencePoints maps the counters of p's interfaces to points the plain
// way, as Gather orders them: every class and action of every block looked
// at, a new map per point; then every rule; then every link.
func referencePoints(t *testing.T, p *XDPDrop) []telegraf.Metric {
	t.Helper()
	action := func(a bpf.Action) string {
		switch {
		case a == bpf.ActionPass:
			return "pass"
		case p.DryRun:
			return "would_drop"
		}
		return "drop"
	}
	var counters, rules, links []telegraf.Metric
	for _, ifc := range p.links.ifaces {
		require.NotNil(t, ifc.prog, "interface %q attached", ifc.name)
		var sums [bpf.MaxRules]bpf.Counter
		err := p.links.readCounters(ifc, func(queue, cpu int, b *bpf.Block) {
			for c := range b.Class {
				for a, n := range b.Class[c] {
					// The default view adds the standing classes at zero.
					if n.Packets == 0 && (queue >= 0 || cpu >= 0 || p.links.standing[c]&(1<<a) == 0) {
						continue
					}
					class := bpf.Class(c)
					tags := map[string]string{
						"interface": ifc.name,
						"family":    class.Family().String(),
						"protocol":  classProtocol(class),
						"action":    action(bpf.Action(a)),
					}
					if cpu >= 0 {
						tags["cpu"] = strconv.Itoa(cpu)
					}
					switch {
					case queue == bpf.QueueSlots-1:
						tags["rx_queue"] = "overflow"
					case queue >= 0:
						tags["rx_queue"] = strconv.Itoa(queue)
					}
					counters = append(counters, testutil.MustMetric("xdp_drop", tags,
						map[string]any{"packets": n.Packets, "bytes": n.Bytes}, time.Unix(0, 0)))
				}
			}
			for i := range sums {
				sums[i].Packets += b.Rule[i].Packets
				sums[i].Bytes += b.Rule[i].Bytes
			}
		})
		require.NoError(t, err)
		for i, r := range p.Rules {
			a := bpf.ActionPass
			if r.Action == "drop" {
				a = bpf.ActionDrop
			}
			rules = append(rules, testutil.MustMetric("xdp_drop_rule",
				map[string]string{"interface": ifc.name, "rule": r.Name, "action": action(a)},
				map[string]any{"packets": sums[i].Packets, "bytes": sums[i].Bytes}, time.Unix(0, 0)))
		}
		links = append(links, testutil.MustMetric("xdp_drop_link",
			map[string]string{"interface": ifc.name, "mode": string(ifc.prog.Mode())},
			map[string]any{"attached": true, "program_id": int64(ifc.prog.ID()), "fallback": false}, time.Unix(0, 0)))
	}
	return append(append(counters, rules...), links...)
}

// BenchmarkAppendClasses maps a block with the traffic mix's classes to
// series: the part of a gather between the kernel read and the points.
func BenchmarkAppendClasses(b *testing.B) {
	x := withDefaults(withDefaults(&XDPDrop{Drop: []any{"all"}}))
	var block bpf.Block
	for c, n := range traffic.Expected(traffic.Mix()) {
		block.Class[c][bpf.ActionDrop] = n
	}
	series := make([]Series, 0, bpf.ClassCount)
	var log seriesLog
	b.ReportAllocs()
	for b.Loop() {
		series = x.links.appendClasses(series[:0], &log, "eth0", &block, "", "")
	}
}

// TestSnapshotOnlyReads: Snapshot attaches nothing, an interface that
// appeared after the start waits for Reconcile, which attaches it.
func TestSnapshotOnlyReads(t *testing.T) {
	ns := testns.New(t)
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpsr0"}, Drop: []any{"udp"}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Len(t, acc.Errors, 1, "xdpsr0 is not there yet")
	_, _, err := ns.AddVeth("xdpsr0", "xdpsr1")
	require.NoError(t, err)

	var snap Snapshot
	inNS(t, ns, p, func() error { snap = p.Snapshot(acc); return nil })
	require.Len(t, snap.Links, 1)
	require.False(t, snap.Links[0].Attached, "a snapshot attached xdpsr0")

	inNS(t, ns, p, func() error { p.Reconcile(acc); snap = p.Snapshot(acc); return nil })
	require.Len(t, acc.Errors, 1, acc.Errors)
	require.Len(t, snap.Links, 1)
	require.True(t, snap.Links[0].Attached, "reconcile attaches xdpsr0: %s", snap.Links[0].Error)
}
