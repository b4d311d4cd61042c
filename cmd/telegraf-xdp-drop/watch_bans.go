package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// renderBans adds the bans section: per interface, the frames the bans of
// each origin decided (rates as the rules'), then the bans' counts, the
// age of the last good pull and, while the feed fails, why.
func renderBans(t *table, bans []xdp_drop.BanSeries, h *history, seconds float64, rated bool, now time.Time) {
	if len(bans) == 0 {
		return
	}
	bans = append([]xdp_drop.BanSeries(nil), bans...)
	sort.SliceStable(bans, func(i, j int) bool { return bans[i].Interface < bans[j].Interface })
	t.row("INTERFACE", fmt.Sprintf(ruleRow, "BANS", "ACTION", "PKTS/S", "BYTES/S", "TOTAL PKTS"))
	for _, s := range bans {
		// A NUL cannot start a rule's name: no rule's series is taken.
		key := ruleKey{s.Interface, "\x00bans " + s.Origin, s.Action}
		was, seen := h.rules[key]
		cur := sample{s.Packets, s.Bytes}
		rt := since(was, seen, cur, seconds)
		h.rules[key] = cur
		pps, bps := rateText(rt, rated)
		t.row(s.Interface, fmt.Sprintf(ruleRow, s.Origin, s.Action, pps, bps, number(s.Packets, totalWidth)))
	}
	// The counts are the instance's: one line, from the first interface.
	s := bans[0]
	if s.Viewed {
		renderViewedBans(t, bans)
		return
	}
	synced := "not synced yet"
	if s.Synced > 0 {
		synced = fmt.Sprintf("synced %s ago", now.Sub(time.Unix(s.Synced, 0)).Round(time.Second))
	}
	t.row("", clip(fmt.Sprintf("%d bans, %d added, %d removed, %d expired, %d refused; %s",
		s.Active, s.Added, s.Removed, s.Expired, s.Refused, synced), width-labelWidth-1))
	if s.Error != "" {
		t.row("", clip("error: "+s.Error, width-labelWidth-1))
	}
}

// renderViewedBans is the counts line of a view of another instance: the
// bans in force by origin, read from the kernel (the instance pulls the
// feed; what it added or lifted is its own to count).
func renderViewedBans(t *table, bans []xdp_drop.BanSeries) {
	first := bans[0].Interface
	var parts []string
	for _, s := range bans {
		if s.Interface == first {
			parts = append(parts, fmt.Sprintf("%s %d", s.Origin, s.Active))
		}
	}
	t.row("", clip("bans in force (read from the kernel): "+strings.Join(parts, ", "), width-labelWidth-1))
	if s := bans[0]; s.Error != "" {
		t.row("", clip("error: "+s.Error, width-labelWidth-1))
	}
}
