//go:build linux

package bans

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// TestDetectEventsBounded: a gather emits at most MaxEvents events;
// the rest are counted in events_unreported, and the next gather starts
// afresh.
func TestDetectEventsBounded(t *testing.T) {
	set := &DetectSettings{PPS: 1000, For: 2 * time.Second, Duration: time.Minute, MaxDuration: time.Hour, DryRun: true}
	d, err := newDetection(&Settings{Max: 1000, Detect: set}, testLog{})
	require.NoError(t, err)
	now := time.Now()
	for i := range MaxEvents + 50 {
		p := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
		d.record(now, detect.Event{Kind: detect.Ban, Source: p, PPS: 2000, Duration: time.Minute, Offence: 1})
	}
	got := d.takeEvents(nil)
	require.Len(t, got, MaxEvents)
	require.Equal(t, Event{Kind: "ban", Source: netip.MustParsePrefix("10.0.0.0/24"), PPS: 2000, Duration: time.Minute, Offence: 1}, got[0])
	require.Equal(t, int64(50), d.counts.unreported)
	require.Equal(t, int64(MaxEvents+50), d.counts.added)
	d.record(now, detect.Event{Kind: detect.Expire, Source: netip.MustParsePrefix("10.0.0.0/24"), Duration: time.Minute, Offence: 1})
	got = d.takeEvents(nil)
	require.Len(t, got, 1)
	require.Equal(t, "expire", got[0].Kind)
}

// TestGuardsAllowAndLAPI: the guards refuse what overlaps an allowed
// prefix (as the bans have them in force, files changed included) or the
// LAPI's address, and nothing else.
func TestGuardsAllowAndLAPI(t *testing.T) {
	g := newGuards("", nil, "http://[2001:db8::10]:8080/")
	require.Equal(t, "2001:db8::10", g.lapi)
	got, err := resolve(g.lapi)
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("2001:db8::10")}, got)
	// The host's addresses and gateways are the namespace's (TestDetectGuards).
	g.list = []guard{{netip.MustParsePrefix("2001:db8::10/128"), "the CrowdSec LAPI 2001:db8::10"}}
	require.Equal(t, "the CrowdSec LAPI 2001:db8::10", g.check(netip.MustParsePrefix("2001:db8::/64")))
	require.Empty(t, g.check(netip.MustParsePrefix("192.0.2.0/24")))
	g.setAllow([]netip.Prefix{netip.MustParsePrefix("192.0.2.128/25")})
	require.Equal(t, "allow_prefix 192.0.2.128/25", g.check(netip.MustParsePrefix("192.0.2.0/24")), "a ban that covers an allowed prefix is refused")
	require.Empty(t, g.check(netip.MustParsePrefix("203.0.113.0/24")))
	many := make([]netip.Prefix, 20)
	for i := range many {
		many[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
	}
	require.Equal(t, "allow_prefix (20 prefixes), the host's address 127.0.0.1", describeGuards(many, []guard{{netip.MustParsePrefix("127.0.0.1/32"), "the host's address 127.0.0.1"}}))
}
