//go:build linux

package xdp_drop

import (
	"errors"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// TestFlowSpecPoints: every rule in force has a point per interface, at
// zero too; a rule withdrawn has one last point (its final counts, those
// counted after the gather before included), then none; a rule announced
// and withdrawn between two gathers has its one point; an interface whose
// counters fail has none, and its error.
func TestFlowSpecPoints(t *testing.T) {
	ntp := bpf.FlowRule{ID: "aaaaaaaaaaaa", Action: bpf.FlowDrop}
	dns := bpf.FlowRule{ID: "bbbbbbbbbbbb", Action: bpf.FlowLimit, Rate: 100}
	sample := bpf.FlowRule{ID: "cccccccccccc", Sample: true}
	text := func(r *bpf.FlowRule) string { return "text of " + r.ID }
	var f flowSeries
	pts, errs := f.points(nil, text, ruled([]bpf.FlowRule{ntp, dns, sample}, []flowRead{
		{name: "eth1", counts: map[string]bpf.FlowCount{ntp.ID: {Packets: 3, Bytes: 1404, DroppedPackets: 3, DroppedBytes: 1404}}},
		{name: "eth2", counts: map[string]bpf.FlowCount{}},
	}))
	require.Empty(t, errs)
	require.Equal(t, []FlowSpecSeries{
		{Interface: "eth1", Rule: ntp.ID, Action: "drop", Text: "text of aaaaaaaaaaaa", Packets: 3, Bytes: 1404, DroppedPackets: 3, DroppedBytes: 1404},
		{Interface: "eth1", Rule: dns.ID, Action: "limit", Text: "text of bbbbbbbbbbbb"},
		{Interface: "eth1", Rule: sample.ID, Action: "accept", Text: "text of cccccccccccc"},
		{Interface: "eth2", Rule: ntp.ID, Action: "drop", Text: "text of aaaaaaaaaaaa"},
		{Interface: "eth2", Rule: dns.ID, Action: "limit", Text: "text of bbbbbbbbbbbb"},
		{Interface: "eth2", Rule: sample.ID, Action: "accept", Text: "text of cccccccccccc"},
	}, pts)

	// ntp withdrawn after 2 more frames, sample withdrawn unread, brief
	// announced and withdrawn since: the read returns them gone with
	// their final counts, and each has one last point.
	brief := bpf.FlowRule{ID: "dddddddddddd", Action: bpf.FlowDrop}
	pts, errs = f.points(nil, text, ruled([]bpf.FlowRule{dns}, []flowRead{
		{name: "eth1", counts: map[string]bpf.FlowCount{
			dns.ID:   {Packets: 1, Bytes: 60},
			ntp.ID:   {Packets: 5, Bytes: 2340, DroppedPackets: 5, DroppedBytes: 2340, Gone: &ntp},
			brief.ID: {Packets: 2, Bytes: 120, DroppedPackets: 2, DroppedBytes: 120, Gone: &brief},
		}},
		{name: "eth2", err: errors.New("interface \"eth2\": read the FlowSpec counters: boom")},
	}))
	require.Len(t, errs, 1)
	require.Equal(t, []FlowSpecSeries{
		{Interface: "eth1", Rule: dns.ID, Action: "limit", Text: "text of bbbbbbbbbbbb", Packets: 1, Bytes: 60},
		{Interface: "eth1", Rule: ntp.ID, Action: "drop", Text: "text of aaaaaaaaaaaa", Packets: 5, Bytes: 2340, DroppedPackets: 5, DroppedBytes: 2340},
		{Interface: "eth1", Rule: sample.ID, Action: "accept", Text: "text of cccccccccccc"},
		{Interface: "eth1", Rule: brief.ID, Action: "drop", Text: "text of dddddddddddd", Packets: 2, Bytes: 120, DroppedPackets: 2, DroppedBytes: 120},
	}, pts)

	// Then none for ntp on eth1; eth2 reads again and owes its last points.
	pts, _ = f.points(nil, text, ruled([]bpf.FlowRule{dns}, []flowRead{
		{name: "eth1", counts: map[string]bpf.FlowCount{dns.ID: {Packets: 2, Bytes: 120}}},
		{name: "eth2", counts: map[string]bpf.FlowCount{}},
	}))
	require.Equal(t, []FlowSpecSeries{
		{Interface: "eth1", Rule: dns.ID, Action: "limit", Text: "text of bbbbbbbbbbbb", Packets: 2, Bytes: 120},
		{Interface: "eth2", Rule: dns.ID, Action: "limit", Text: "text of bbbbbbbbbbbb"},
		{Interface: "eth2", Rule: ntp.ID, Action: "drop", Text: "text of aaaaaaaaaaaa"},
		{Interface: "eth2", Rule: sample.ID, Action: "accept", Text: "text of cccccccccccc"},
	}, pts)

	acc := &testutil.Accumulator{}
	emitSnapshot(acc, &Snapshot{Time: time.Unix(0, 0), FlowSpec: pts[:1]})
	testutil.RequireMetricsEqual(t, []telegraf.Metric{testutil.MustMetric(MeasurementFlowSpec,
		map[string]string{TagInterface: "eth1", TagRule: dns.ID, TagAction: "limit"},
		map[string]any{FieldRuleText: "text of bbbbbbbbbbbb", FieldPackets: uint64(2), FieldBytes: uint64(120), FieldDroppedPackets: uint64(0), FieldDroppedBytes: uint64(0)},
		time.Unix(0, 0))}, acc.GetTelegrafMetrics())
}

// ruled gives every read the rules in force.
func ruled(rules []bpf.FlowRule, reads []flowRead) []flowRead {
	for i := range reads {
		reads[i].rules = rules
	}
	return reads
}
