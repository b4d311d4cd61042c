//go:build linux

package xdp_drop

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// TestDetectEventsBounded: a gather emits at most maxBanEvents events;
// the rest are counted in events_unreported, and the next gather starts
// afresh.
func TestDetectEventsBounded(t *testing.T) {
	set := &detectSettings{pps: 1000, forDur: 2 * time.Second, duration: time.Minute, maxDuration: time.Hour, dryRun: true}
	d, err := newDetection(set, &bansSettings{max: 1000}, namespace{}, testutil.Logger{})
	require.NoError(t, err)
	now := time.Now()
	for i := range maxBanEvents + 50 {
		p := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
		d.record(now, detect.Event{Kind: detect.Ban, Source: p, PPS: 2000, Duration: time.Minute, Offence: 1})
	}
	got := d.takeEvents(nil)
	require.Len(t, got, maxBanEvents)
	require.Equal(t, BanEvent{Origin: OriginDetect, Event: EventBan, Source: "10.0.0.0/24", PPS: 2000, DurationS: 60, Offence: 1}, got[0])
	require.Equal(t, int64(50), d.counts.unreported)
	require.Equal(t, int64(maxBanEvents+50), d.counts.added)
	d.record(now, detect.Event{Kind: detect.Expire, Source: netip.MustParsePrefix("10.0.0.0/24"), Duration: time.Minute, Offence: 1})
	got = d.takeEvents(nil)
	require.Len(t, got, 1)
	require.Equal(t, EventExpire, got[0].Event)
}
