//go:build linux

package xdp_drop

import (
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBansResyncBringsMissed: a decision the real LAPI's deltas never
// send (made while it answered a pull) is dropped after the periodic full
// pull, within resync, and the log says what the resync put in force; the
// decisions the deltas did send are untouched by it.
func TestBansResyncBringsMissed(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-resync")
	l.AddDecision("203.0.113.0/24", time.Hour)
	ns := testns.New(t)
	p := banPlugin(l, key, nil)
	const resync = 3 * time.Second
	p.Bans.CrowdSec.Resync = config.Duration(resync)
	log := &testutil.CaptureLogger{}
	p.Log = log
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 1 })

	l.AddMissedDecision("198.51.100.7", time.Hour)
	l.AddDecision("192.0.2.99", time.Hour)
	waitBans(t, ns, p, "the delta's decision in force", func(f map[string]any) bool { return field(f, FieldActive) >= 2 })
	missed := time.Now()
	f := waitBans(t, ns, p, "the missed decision in force after a resync", func(f map[string]any) bool { return field(f, FieldActive) == 3 })
	t.Logf("the missed decision in force %v after the delta's (resync = %v)", time.Since(missed).Round(time.Millisecond), resync)
	require.Equal(t, int64(3), field(f, FieldAdded))
	require.Equal(t, int64(0), field(f, FieldRemoved))
	require.Equal(t, int64(0), field(f, FieldRefused))
	sendBanFlows(t, ns,
		banFlow{"198.51.100.7", 4, 0}, // the missed decision
		banFlow{"192.0.2.99", 3, 0},   // the delta's
		banFlow{"203.0.113.9", 2, 0},  // the startup pull's
		banFlow{"198.51.100.8", 5, 5}, // beside the missed one
	)
	f, _ = banPoint(t, ns, p)
	require.Equal(t, uint64(9), f[FieldPackets])

	var said []string
	for _, m := range log.Messages() {
		if strings.Contains(m.Text, "periodic full pull") {
			said = append(said, m.Text)
		}
	}
	require.Equal(t, []string{"bans: crowdsec: the periodic full pull (resync = 3s) found what the LAPI's deltas had missed: banned 1 prefix, lifted 0 bans (the LAPI can miss a decision made while it answers a pull)"}, said)
}
