//go:build linux

package xdp_drop

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// counts are the counters of one read: class and action to packets; each
// frame is 100 bytes.
type counts map[bpf.Class]map[bpf.Action]uint64

func (c counts) block() *bpf.Block {
	var b bpf.Block
	for class, byAction := range c {
		for a, n := range byAction {
			b.Class[class][a] = bpf.Counter{Packets: n, Bytes: 100 * n}
		}
	}
	return &b
}

// gatherer drives the Snapshot → points path of one interface without a
// kernel: each gather reads the blocks it is given, as readCounters would
// pass them, and emits the points as Gather does.
type gatherer struct {
	x   *XDPDrop
	ifc *iface
	at  time.Time
}

func newGatherer(t *testing.T, x *XDPDrop) *gatherer {
	t.Helper()
	x.Interfaces = []string{"eth1"}
	x.Log = testutil.Logger{}
	require.NoError(t, x.Init())
	return &gatherer{x: x, ifc: x.links.ifaces[0], at: time.Unix(1_700_000_000, 0)}
}

// attach is what a successful attach does to the series log.
func (g *gatherer) attach() { g.ifc.series.attached(g.x.links.gathers) }

// gather reads blocks (cpu -1 for the summed view) ten seconds after the
// last gather and returns the points.
func (g *gatherer) gather(t *testing.T, blocks map[int]counts) []telegraf.Metric {
	t.Helper()
	g.x.links.gathers++
	g.at = g.at.Add(10 * time.Second)
	var snap Snapshot
	acc := &testutil.Accumulator{}
	cpus := slices.Sorted(func(yield func(int) bool) {
		for cpu := range blocks {
			if !yield(cpu) {
				return
			}
		}
	})
	g.x.links.readSeriesFrom(acc, g.ifc, &snap, func(f bpf.BlockFunc) error {
		for _, cpu := range cpus {
			// As the kernel read does: a block without traffic is not passed.
			if b := blocks[cpu].block(); *b != (bpf.Block{}) {
				f(-1, cpu, b)
			}
		}
		return nil
	})
	g.x.links.stampSnapshot(&snap, g.at)
	emitSnapshot(acc, &snap)
	require.Empty(t, acc.Errors)
	return acc.GetTelegrafMetrics()
}

// seriesID names a point's series by its tags.
func seriesID(m telegraf.Metric) string {
	var tags []string
	for k, v := range m.Tags() {
		tags = append(tags, k+"="+v)
	}
	sort.Strings(tags)
	return strings.Join(tags, ",")
}

// differenceTotals is what every shipped total computes from the xdp_drop
// points: per series, in time order, the increase from the point before,
// or the value itself where the counter went down; summed per protocol and
// action.
func differenceTotals(points []telegraf.Metric) map[string]int {
	bySeries := map[string][]telegraf.Metric{}
	for _, m := range points {
		if m.Name() == MeasurementCounters {
			bySeries[seriesID(m)] = append(bySeries[seriesID(m)], m)
		}
	}
	totals := map[string]int{}
	for _, ms := range bySeries {
		slices.SortStableFunc(ms, func(a, b telegraf.Metric) int { return a.Time().Compare(b.Time()) })
		for i := 1; i < len(ms); i++ {
			prev, _ := ms[i-1].GetField(FieldPackets)
			cur, _ := ms[i].GetField(FieldPackets)
			inc := cur.(uint64)
			if cur.(uint64) >= prev.(uint64) {
				inc -= prev.(uint64)
			}
			tags := ms[i].Tags()
			totals[tags[TagFamily]+"/"+tags[TagProtocol]+"/"+tags[TagAction]] += int(inc)
		}
	}
	for k, v := range totals {
		if v == 0 {
			delete(totals, k)
		}
	}
	return totals
}

// zeroPoints lists the xdp_drop points at zero whose time is not the
// gather's: "family/protocol/action@seconds before".
func zeroPoints(points []telegraf.Metric, at time.Time) []string {
	var out []string
	for _, m := range points {
		if m.Name() != MeasurementCounters || m.Time().Equal(at) {
			continue
		}
		p, _ := m.GetField(FieldPackets)
		tags := m.Tags()
		out = append(out, fmt.Sprintf("%s/%s/%s@-%s=%d", tags[TagFamily], tags[TagProtocol], tags[TagAction], at.Sub(m.Time()), p))
	}
	sort.Strings(out)
	return out
}

var (
	udp4  = bpf.IPv4Class(17)
	icmp4 = bpf.IPv4Class(1)
	gre4  = bpf.IPv4Class(47)
	esp4  = bpf.IPv4Class(50)
	esp6  = bpf.IPv6Class(50)
	drop  = bpf.ActionDrop
	pass  = bpf.ActionPass
)

// TestFirstBurstCounted: a class first counted between two gathers is
// counted whole by the difference-based totals, standing class or not,
// in the default view and split per CPU; the numbers are the issue's.
func TestFirstBurstCounted(t *testing.T) {
	for _, perCPU := range []bool{false, true} {
		t.Run(fmt.Sprintf("per_cpu=%v", perCPU), func(t *testing.T) {
			g := newGatherer(t, withDefaults(&XDPDrop{Drop: []any{"udp", "icmp", "gre"}, PerCPU: perCPU}))
			cpu := -1
			if perCPU {
				cpu = 1
			}
			var all []telegraf.Metric
			g.attach()
			all = append(all, g.gather(t, map[int]counts{cpu: {}})...)
			// The first round: 7,000 frames, esp (passed) among them.
			points := g.gather(t, map[int]counts{cpu: {udp4: {drop: 6600}, icmp4: {drop: 300}, esp4: {pass: 100}}})
			all = append(all, points...)
			zeros := []string{"ipv4/esp/pass@-10s=0"}
			if perCPU {
				zeros = []string{"ipv4/esp/pass@-10s=0", "ipv4/icmp/drop@-10s=0", "ipv4/udp/drop@-10s=0"}
			}
			require.Equal(t, map[string]int{"ipv4/udp/drop": 6600, "ipv4/icmp/drop": 300, "ipv4/esp/pass": 100}, differenceTotals(all),
				"the totals after the first round are the frames counted")
			require.Equal(t, zeros, zeroPoints(points, g.at), "zero points at the gather before, for the series new since")

			// The second round, with gre and IPv6 esp new, on another CPU too.
			second := map[int]counts{cpu: {udp4: {drop: 10300}, icmp4: {drop: 500}, gre4: {drop: 100}, esp4: {pass: 100}}}
			if perCPU {
				second[0] = counts{esp6: {pass: 7}}
			} else {
				second[cpu][esp6] = map[bpf.Action]uint64{pass: 7}
			}
			points = g.gather(t, second)
			all = append(all, points...)
			zeros = []string{"ipv6/esp/pass@-10s=0"}
			if perCPU {
				zeros = []string{"ipv4/gre/drop@-10s=0", "ipv6/esp/pass@-10s=0"}
			}
			require.Equal(t, zeros, zeroPoints(points, g.at))
			require.Equal(t, map[string]int{"ipv4/udp/drop": 10300, "ipv4/icmp/drop": 500, "ipv4/gre/drop": 100, "ipv4/esp/pass": 100, "ipv6/esp/pass": 7},
				differenceTotals(all), "the totals after the second round are the frames counted")

			// Nothing new: no zero point.
			require.Empty(t, zeroPoints(g.gather(t, second), g.at))
		})
	}
}

// TestFirstBurstAfterAttach: the first gather after an attach has read
// nothing at zero, so it adds no zero point; the next one does. A program
// attached in place of one read in the same gather is read at the next,
// and its new series get a zero at that gather, not the ones it had.
func TestFirstBurstAfterAttach(t *testing.T) {
	g := newGatherer(t, withDefaults(&XDPDrop{Drop: []any{"udp"}}))
	g.attach()
	points := g.gather(t, map[int]counts{-1: {esp4: {pass: 5}}})
	require.Empty(t, zeroPoints(points, g.at), "nothing read before: no zero point")
	points = g.gather(t, map[int]counts{-1: {esp4: {pass: 5}, esp6: {pass: 3}}})
	require.Equal(t, []string{"ipv6/esp/pass@-10s=0"}, zeroPoints(points, g.at))

	// Detached and attached again in one gather: the old counters' points
	// stand for it, the new counters are not read then.
	g.x.links.gathers++
	g.at = g.at.Add(10 * time.Second)
	var snap Snapshot
	acc := &testutil.Accumulator{}
	read := func(c counts) func(bpf.BlockFunc) error {
		return func(f bpf.BlockFunc) error { f(-1, -1, c.block()); return nil }
	}
	g.x.links.readSeriesFrom(acc, g.ifc, &snap, read(counts{esp4: {pass: 9}, esp6: {pass: 3}}))
	g.ifc.series.attached(g.x.links.gathers)
	g.x.links.readSeriesFrom(acc, g.ifc, &snap, read(counts{}))
	g.x.links.stampSnapshot(&snap, g.at)
	emitSnapshot(acc, &snap)
	require.Len(t, snap.Rules, 0)
	var esp []string
	for _, s := range snap.Series {
		if s.Protocol == "esp" {
			esp = append(esp, fmt.Sprintf("%s=%d", s.Family, s.Packets))
		}
	}
	require.Equal(t, []string{"ipv4=9", "ipv6=3"}, esp, "one point per series: the old counters'")
	// The new counters: esp4 restarted (a decrease, no zero), gre new.
	points = g.gather(t, map[int]counts{-1: {esp4: {pass: 2}, gre4: {pass: 4}}})
	require.Equal(t, []string{"ipv4/gre/pass@-10s=0"}, zeroPoints(points, g.at))

	// Attached again in a later gather than the last read: anew.
	g.attach()
	g.x.links.gathers++ // a gather that found it detached and could not attach
	g.attach()
	points = g.gather(t, map[int]counts{-1: {esp6: {pass: 1}}})
	require.Empty(t, zeroPoints(points, g.at), "nothing read since the attach: no zero point")
}

// standingKeys lists a standing set as "family/protocol/action".
func standingKeys(x *XDPDrop) []string {
	var out []string
	for c := range x.links.standing {
		for a := range bpf.ActionCount {
			if x.links.standing[c]&(1<<a) != 0 {
				class := bpf.Class(c)
				out = append(out, class.Family().String()+"/"+ClassProtocol(class)+"/"+ActionTag(x.DryRun, bpf.Action(a)))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestStandingClasses: the series emitted at zero from attach, for
// Prometheus, are the common classes and those the policy names, under
// every action the policy can give them, and nothing else.
func TestStandingClasses(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    *XDPDrop
		want []string
	}{
		{"drop list", withDefaults(&XDPDrop{Drop: []any{"udp", "icmpv6", "gre"}}), []string{
			"ipv4/gre/drop", "ipv4/icmp/pass", "ipv4/ipv6-icmp/drop", "ipv4/tcp/pass", "ipv4/truncated/pass", "ipv4/udp/drop",
			"ipv6/gre/drop", "ipv6/ipv6-icmp/drop", "ipv6/tcp/pass", "ipv6/truncated/pass", "ipv6/udp/drop",
			"l2/arp/pass", "l2/other/pass", "l2/truncated/pass",
		}},
		{"dry run", withDefaults(&XDPDrop{Drop: []any{"udp"}, DryRun: true}), []string{
			"ipv4/icmp/pass", "ipv4/tcp/pass", "ipv4/truncated/pass", "ipv4/udp/would_drop",
			"ipv6/ipv6-icmp/pass", "ipv6/tcp/pass", "ipv6/truncated/pass", "ipv6/udp/would_drop",
			"l2/arp/pass", "l2/other/pass", "l2/truncated/pass",
		}},
		{"drop all", withDefaults(&XDPDrop{Drop: []any{"all"}}), []string{
			"ipv4/icmp/drop", "ipv4/tcp/drop", "ipv4/truncated/drop", "ipv4/udp/drop",
			"ipv6/ipv6-icmp/drop", "ipv6/tcp/drop", "ipv6/truncated/drop", "ipv6/udp/drop",
			"l2/arp/drop", "l2/other/drop", "l2/truncated/drop",
		}},
		{"rules", withDefaults(&XDPDrop{Drop: []any{"udp"}, Rules: []Rule{
			{Name: "sctp-ceiling", Action: "limit", Protocol: []any{"sctp"}, DstPort: []any{int64(9)}, Rate: int64(1), Burst: int64(5), Per: "rule"},
			{Name: "tcp-in", Action: "drop", Protocol: []any{"tcp"}, DstPort: []any{int64(22)}},
		}}), []string{
			"ipv4/icmp/pass", "ipv4/sctp/drop", "ipv4/sctp/pass", "ipv4/tcp/drop", "ipv4/tcp/pass", "ipv4/truncated/pass", "ipv4/udp/drop",
			"ipv6/ipv6-icmp/pass", "ipv6/sctp/drop", "ipv6/sctp/pass", "ipv6/tcp/drop", "ipv6/tcp/pass", "ipv6/truncated/pass", "ipv6/udp/drop",
			"l2/arp/pass", "l2/other/pass", "l2/truncated/pass",
		}},
		{"rule of any protocol", withDefaults(&XDPDrop{Rules: []Rule{
			{Name: "darknet", Action: "drop", DstPrefix: []string{"198.51.100.0/24"}},
		}}), []string{
			"ipv4/icmp/drop", "ipv4/icmp/pass", "ipv4/tcp/drop", "ipv4/tcp/pass", "ipv4/truncated/pass", "ipv4/udp/drop", "ipv4/udp/pass",
			"ipv6/ipv6-icmp/drop", "ipv6/ipv6-icmp/pass", "ipv6/tcp/drop", "ipv6/tcp/pass", "ipv6/truncated/pass", "ipv6/udp/drop", "ipv6/udp/pass",
			"l2/arp/pass", "l2/other/pass", "l2/truncated/pass",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGatherer(t, tc.x)
			require.Equal(t, tc.want, standingKeys(g.x))
			// From the first gather after attach, at zero, in the default
			// view only.
			g.attach()
			var got []string
			for _, m := range g.gather(t, map[int]counts{-1: {}}) {
				if m.Name() == MeasurementCounters {
					p, _ := m.GetField(FieldPackets)
					require.Equal(t, uint64(0), p)
					got = append(got, m.Tags()[TagFamily]+"/"+m.Tags()[TagProtocol]+"/"+m.Tags()[TagAction])
				}
			}
			sort.Strings(got)
			require.Equal(t, tc.want, got)
			g.x.PerCPU = true
			for _, m := range g.gather(t, map[int]counts{0: {}}) {
				require.NotEqual(t, MeasurementCounters, m.Name(), "no standing series per CPU")
			}
		})
	}
}
