package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// TestRenderBans: the bans section shows each interface's frames the bans
// decided, with rates from the screen before, and the bans' counts once,
// the age of the last good pull and the feed's error.
func TestRenderBans(t *testing.T) {
	now := time.Date(2026, 11, 30, 2, 37, 14, 0, time.UTC)
	snap := func(eth1, eth2 uint64, errText string) xdp_drop.Snapshot {
		ban := func(iface string, packets uint64) xdp_drop.BanSeries {
			return xdp_drop.BanSeries{Interface: iface, Origin: "crowdsec", Action: "drop", Packets: packets, Bytes: packets * 60,
				Active: 12, Added: 15, Removed: 2, Expired: 1, Refused: 3, Synced: now.Add(-4 * time.Second).Unix(), Error: errText}
		}
		return xdp_drop.Snapshot{Bans: []xdp_drop.BanSeries{ban("eth2", eth2), ban("eth1", eth1)}}
	}
	h := newHistory()
	render(snap(100, 0, ""), h, time.Second, now, time.Second)
	got := render(snap(300, 0, "bans: crowdsec: connection refused"), h, 2*time.Second, now, time.Second)
	require.Contains(t, got, "\n"+strings.Join([]string{
		"INTERFACE    BANS                 ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         crowdsec             drop               100   6.0 kB/s         300",
		"eth2         crowdsec             drop                 0    0.0 B/s           0",
		"             12 bans, 15 added, 2 removed, 1 expired, 3 refused; synced 4s ago",
		"             error: bans: crowdsec: connection refused",
	}, "\n")+"\n")
	requireFits(t, got)
	require.NotContains(t, render(xdp_drop.Snapshot{}, newHistory(), time.Second, now, time.Second), "BANS")
}
