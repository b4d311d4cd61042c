package main

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// topRow is the top sources' row after the label, at most width-13 columns:
// source (an IPv6 /64 is at most 23 characters), action, estimated
// packets per second, share of the action's sampled frames, protocol.
// Rows go heaviest first: the rank is their order.
const (
	topRow           = "%-25s %-10.10s %11s %6s %s"
	topSourceWidth   = 25
	topProtocolWidth = 10
)

// renderTop adds the top sources of the sampled frames since the last
// screen, per interface and action, heaviest first; rates are the
// estimates (scaled to the frames counted) over the time since the last screen.
func renderTop(t *table, top []xdp_drop.TopSource, seconds float64) {
	if len(top) == 0 {
		return
	}
	top = append([]xdp_drop.TopSource(nil), top...)
	sort.SliceStable(top, func(i, j int) bool {
		if top[i].Interface != top[j].Interface {
			return top[i].Interface < top[j].Interface
		}
		if top[i].Action != top[j].Action {
			return top[i].Action < top[j].Action
		}
		return top[i].Rank < top[j].Rank
	})
	t.row("INTERFACE", fmt.Sprintf(topRow, "TOP SOURCE (sampled)", "ACTION", "PKTS/S", "SHARE", "PROTOCOL"))
	for _, s := range top {
		pps := 0.0
		if seconds > 0 {
			pps = float64(s.Packets) / seconds
		}
		share := strconv.FormatFloat(100*s.Share, 'f', 1, 64) + "%"
		t.row(s.Interface, fmt.Sprintf(topRow, clip(s.Source, topSourceWidth), s.Action,
			perSecond(pps, pktsWidth), share, clip(s.Protocol, topProtocolWidth)))
	}
}

// sampleText is the sampling counters of an attached interface's link
// line, "" without sampling.
func sampleText(l xdp_drop.Link) string {
	if !l.Sampling {
		return ""
	}
	return fmt.Sprintf("; sampled %d, lost %d, capped %d", l.Sampled, l.SampleLost, l.SampleCapped)
}
