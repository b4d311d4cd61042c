package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// viewedFlowSpec is a view's snapshot beside an instance with a FlowSpec
// rule in force on two interfaces, and its peer, whose states it wrote 3 s
// before now.
func viewedFlowSpec(now time.Time, eth1 uint64) xdp_drop.Snapshot {
	const text = "destination 10.9.0.1/32 protocol ==17 source-port ==123 packet-length >=400 then discard"
	rule := func(iface string, packets uint64) xdp_drop.FlowSpecSeries {
		return xdp_drop.FlowSpecSeries{Interface: iface, Rule: "3f2a9c1b7d4e", Action: xdp_drop.FlowActionDrop, Text: text,
			Packets: packets, Bytes: packets * 468, DroppedPackets: packets, DroppedBytes: packets * 468}
	}
	refused := make([]int64, len(xdp_drop.FlowRefusals))
	refused[0] = 2 // only_local_destinations
	return xdp_drop.Snapshot{Time: now, FlowViewed: true, FlowPeersAt: now.Add(-3 * time.Second),
		FlowSpec: []xdp_drop.FlowSpecSeries{rule("eth2", 0), rule("eth1", eth1)},
		FlowPeers: []xdp_drop.FlowPeerSeries{{Peer: "192.0.2.1", State: "established", Up: true, UptimeS: 754,
			Received: 3, Accepted: 1, Refused: 2, RefusedBy: refused, LastUpdateS: 12}}}
}

// TestRenderFlowSpecView: beside a running instance, -watch lists the
// rules it has in force per interface, with their rates from the screen
// before and totals, and its peer, saying they are read from it and how
// old the peers' states are.
func TestRenderFlowSpecView(t *testing.T) {
	now := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	h := newHistory()
	render(viewedFlowSpec(now, 37), h, time.Second, now, time.Second)
	got := render(viewedFlowSpec(now, 137), h, 2*time.Second, now, time.Second)
	require.Contains(t, got, "\n"+strings.Join([]string{
		"             flowspec, read from the running instance: peers as of 3s ago",
		"INTERFACE    FLOWSPEC RULE        ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         destinati... discard drop                50  23.4 kB/s         137",
		"eth2         destinati... discard drop                 0    0.0 B/s           0",
		"             flowspec peer 192.0.2.1: up 754s; 3 rules received, 1 accepted,...",
	}, "\n")+"\n")
	requireFits(t, got)

	snap := viewedFlowSpec(now, 0)
	snap.FlowPeersAt, snap.FlowPeers = time.Time{}, nil
	require.Contains(t, render(snap, newHistory(), time.Second, now, time.Second),
		"flowspec, read from the running instance: no peer state yet")
}

// TestStatusFlowSpecView: -status lists the rules in force beside a
// running instance, their text and exact counts per interface, and its
// peer; -status -json carries the same.
func TestStatusFlowSpecView(t *testing.T) {
	now := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	f := newFlowSpecStatus(viewedFlowSpec(now, 37))
	require.Equal(t, "flowspec, read from the running instance: peers as of 3s ago", f.Note)
	require.Equal(t, []flowRuleStatus{
		{Interface: "eth2", Rule: "3f2a9c1b7d4e", Action: "drop", Text: "destination 10.9.0.1/32 protocol ==17 source-port ==123 packet-length >=400 then discard"},
		{Interface: "eth1", Rule: "3f2a9c1b7d4e", Action: "drop", Text: "destination 10.9.0.1/32 protocol ==17 source-port ==123 packet-length >=400 then discard",
			Packets: 37, Bytes: 37 * 468, DroppedPackets: 37, DroppedBytes: 37 * 468},
	}, f.Rules)
	require.Equal(t, []string{"flowspec peer 192.0.2.1: up 754s; 3 rules received, 1 accepted, 2 refused (only_local_destinations 2); last update 12s ago"}, f.Peers)
	var b strings.Builder
	renderFlowSpecStatus(&b, f)
	t.Logf("\n%s", b.String())
	lines := strings.Split(b.String(), "\n")
	require.Equal(t, f.Note, lines[1])
	require.Regexp(t, `^FLOWSPEC RULE\s+INTERFACE\s+ACTION\s+PACKETS\s+DROPPED\s+TEXT$`, lines[2])
	require.Regexp(t, `^3f2a9c1b7d4e\s+eth2\s+drop\s+0\s+0\s+destination 10.9.0.1/32 protocol ==17 source-port ==123 packet-length >=400 then discard$`, lines[3])
	require.Regexp(t, `^3f2a9c1b7d4e\s+eth1\s+drop\s+37\s+37\s+destination 10.9.0.1/32 `, lines[4])
	require.Equal(t, f.Peers[0], lines[5])
}
