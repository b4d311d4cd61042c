package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// flowSpecViewed is what a console view says of where its FlowSpec rules
// and peers come from: the running instance's maps, read-only (a second
// speaker with the same router_id would reset its sessions), the peers as
// that instance last wrote them, and how long before now.
func flowSpecViewed(snap xdp_drop.Snapshot, now time.Time) string {
	const from = "flowspec, read from the running instance"
	if snap.FlowPeersAt.IsZero() {
		return from + ": no peer state yet"
	}
	return fmt.Sprintf("%s: peers as of %ds ago", from, max(int64(now.Sub(snap.FlowPeersAt)/time.Second), 0))
}

// renderFlowSpec adds the FlowSpec section: per interface the rules in
// force in enforcement order, with rates, then a line per peer.
func renderFlowSpec(t *table, snap xdp_drop.Snapshot, h *history, seconds float64, rated bool, now time.Time) {
	if snap.FlowViewed {
		t.row("", clip(flowSpecViewed(snap, now), width-labelWidth-1))
	}
	if len(snap.FlowSpec) > 0 {
		rules := append([]xdp_drop.FlowSpecSeries(nil), snap.FlowSpec...)
		sort.SliceStable(rules, func(i, j int) bool { return rules[i].Interface < rules[j].Interface })
		t.row("INTERFACE", fmt.Sprintf(ruleRow, "FLOWSPEC RULE", "ACTION", "PKTS/S", "BYTES/S", "TOTAL PKTS"))
		for _, r := range rules {
			// A NUL cannot start a rule's name: no rule's series is taken.
			key := ruleKey{r.Interface, "\x00flowspec " + r.Rule, r.Action}
			was, seen := h.rules[key]
			cur := sample{r.Packets, r.Bytes}
			rt := since(was, seen, cur, seconds)
			h.rules[key] = cur
			pps, bps := rateText(rt, rated)
			t.row(r.Interface, fmt.Sprintf(ruleRow, clipMiddle(r.Text, ruleWidth), r.Action, pps, bps, number(r.Packets, totalWidth)))
		}
	}
	for _, p := range snap.FlowPeers {
		t.row("", clip(peerText(p), width-labelWidth-1))
	}
}

// peerText is a peer's line: its state, for how long, what it sent.
func peerText(p xdp_drop.FlowPeerSeries) string {
	up := p.State
	if p.Up {
		up = fmt.Sprintf("up %ds", p.UptimeS)
	}
	last := "no update yet"
	if p.LastUpdateS >= 0 {
		last = fmt.Sprintf("last update %ds ago", p.LastUpdateS)
	}
	var refused []string
	for i, reason := range xdp_drop.FlowRefusals {
		if i < len(p.RefusedBy) && p.RefusedBy[i] > 0 {
			refused = append(refused, fmt.Sprintf("%s %d", reason, p.RefusedBy[i]))
		}
	}
	why := ""
	if len(refused) > 0 {
		why = " (" + strings.Join(refused, ", ") + ")"
	}
	return fmt.Sprintf("flowspec peer %s: %s; %d rules received, %d accepted, %d refused%s; %s",
		p.Peer, up, p.Received, p.Accepted, p.Refused, why, last)
}
