//go:build linux

package xdp_drop

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// ownersPlugin is a plugin with the LAPI's feed and a detection that
// enforces, banning single addresses (/32) for duration.
func ownersPlugin(l *lapi.LAPI, key string, duration time.Duration) *XDPDrop {
	p := detectPlugin(&DetectConfig{PPS: 1000, Duration: config.Duration(duration), DryRun: enforce(), UnverifiedAction: "drop"},
		&BansConfig{CrowdSec: &CrowdSecConfig{URL: l.URL(), APIKey: key, Interval: config.Duration(testBanInterval)}})
	p.TopSourcePrefixV4 = 32
	return p
}

// originPoints gathers once and returns the test veth's xdp_drop_ban
// fields of each origin.
func originPoints(t *testing.T, ns *testns.NS, p *XDPDrop) map[string]map[string]any {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	out := map[string]map[string]any{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementBan && m.Tags()[TagInterface] == testns.Dev {
			require.NotContains(t, out, m.Tags()[TagOrigin], "one point per origin")
			out[m.Tags()[TagOrigin]] = m.Fields()
		}
	}
	require.Contains(t, out, OriginCrowdSec)
	require.Contains(t, out, OriginDetect)
	return out
}

// waitOrigin gathers until origin's point satisfies ok, and returns every
// origin's fields then.
func waitOrigin(t *testing.T, ns *testns.NS, p *XDPDrop, origin, what string, ok func(f map[string]any) bool) map[string]map[string]any {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for {
		pts := originPoints(t, ns, p)
		if ok(pts[origin]) {
			return pts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; the last %s fields: %v", what, testns.Hang, origin, pts[origin])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// floodUntilBanned floods srcs until the detection has them all banned.
func floodUntilBanned(t *testing.T, ns *testns.NS, p *XDPDrop, srcs ...string) {
	t.Helper()
	flood(t, ns, srcs, 10_000, func() bool {
		ban, _ := gatherDetect(t, ns, p)
		return field(ban.Fields(), FieldActive) == int64(len(srcs))
	})
}

// TestBansLAPIDecisionLeavesDetectionsBan: the LAPI's decisions on
// prefixes that detection banned for 10 minutes (one of 2 s, one deleted)
// end without lifting detection's bans: the frames of the renewed flood
// are dropped while detection's bans are in force. Each origin counts its
// own: the feed added, expired and removed its decisions, detection still
// holds its two bans, and the frames are detection's, which banned first.
func TestBansLAPIDecisionLeavesDetectionsBan(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	ns := testns.New(t)
	p := ownersPlugin(l, key, 10*time.Minute)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitOrigin(t, ns, p, OriginCrowdSec, "the first pull", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	floodUntilBanned(t, ns, p, "10.2.2.2", "10.3.3.3")
	detected := banCounterOf(t, p, bpf.BanOriginDetect, bpf.BanDrop)

	l.AddDecision("10.2.2.2", 2*time.Second)
	l.AddDecision("10.3.3.3", time.Hour)
	waitOrigin(t, ns, p, OriginCrowdSec, "the 2 s decision's end", func(f map[string]any) bool { return field(f, FieldExpired) == 1 })
	l.DeleteDecision("10.3.3.3")
	pts := waitOrigin(t, ns, p, OriginCrowdSec, "the deletion", func(f map[string]any) bool { return field(f, FieldRemoved) == 1 })

	sendBanFlows(t, ns, banFlow{"10.2.2.2", 8000, 0}, banFlow{"10.3.3.3", 8000, 0}, banFlow{"10.4.4.4", 100, 100})
	pts = originPoints(t, ns, p)
	cs, det := pts[OriginCrowdSec], pts[OriginDetect]
	require.Equal(t, int64(2), field(cs, FieldAdded), "the feed's decisions are its own bans")
	require.Equal(t, int64(0), field(cs, FieldActive))
	require.Equal(t, int64(1), field(cs, FieldExpired))
	require.Equal(t, int64(1), field(cs, FieldRemoved))
	require.Equal(t, int64(0), field(cs, FieldPackets), "the frames are detection's, which banned first")
	require.Equal(t, int64(2), field(det, FieldActive))
	require.Equal(t, int64(2), field(det, FieldAdded))
	require.Equal(t, int64(0), field(det, FieldExpired))
	require.Equal(t, detected+16000, banCounterOf(t, p, bpf.BanOriginDetect, bpf.BanDrop))
}

// countingFeed is a feed that records whether each pull was a full one.
type countingFeed struct {
	bans.Feed
	mu    sync.Mutex
	fulls int
}

func (f *countingFeed) Pull(ctx context.Context, startup bool) (crowdsec.Delta, error) {
	f.mu.Lock()
	if startup {
		f.fulls++
	}
	f.mu.Unlock()
	return f.Feed.Pull(ctx, startup)
}

func (f *countingFeed) full() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fulls
}

// TestBansFeedCountsItsOwn: with no decision in the LAPI, detection's 4 s
// ban is not the feed's: origin=crowdsec reports nothing in force while
// it holds and nothing expired when it ends, and no full pull follows.
func TestBansFeedCountsItsOwn(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	ns := testns.New(t)
	p := ownersPlugin(l, key, 4*time.Second)
	require.NoError(t, p.Init())
	feed := &countingFeed{}
	p.bans.WrapFeed(func(f bans.Feed) bans.Feed { feed.Feed = f; return feed })
	require.Empty(t, startPluginInitialised(t, ns, p).Errors)
	waitOrigin(t, ns, p, OriginCrowdSec, "the first pull", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	floodUntilBanned(t, ns, p, "10.2.2.2")

	cs := originPoints(t, ns, p)[OriginCrowdSec]
	require.Equal(t, int64(0), field(cs, FieldActive), "detection's ban in force is not the feed's")
	require.Equal(t, int64(0), field(cs, FieldAdded))
	pts := waitOrigin(t, ns, p, OriginDetect, "detection's ban's end", func(f map[string]any) bool { return field(f, FieldExpired) == 1 })
	time.Sleep(3 * testBanInterval) // the feed's sweeps after the end
	pts = originPoints(t, ns, p)
	cs = pts[OriginCrowdSec]
	require.Equal(t, int64(0), field(cs, FieldActive))
	require.Equal(t, int64(0), field(cs, FieldExpired), "detection's expiry is not the feed's")
	require.Equal(t, int64(0), field(cs, FieldRemoved))
	require.Equal(t, int64(0), field(pts[OriginDetect], FieldActive))
	require.Equal(t, 1, feed.full(), "the startup pull alone was a full one")
}

// TestBansDetectionsBanComesBack: detection's ban pushed to the LAPI comes
// back to the same host as a decision: the feed counts it as its own once,
// and detection's point, frames included, is what it would be without it.
func TestBansDetectionsBanComesBack(t *testing.T) {
	l := lapi.Start(t)
	pwFile := filepath.Join(t.TempDir(), "machine.pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("comeback-pass-word\n"), 0o600))
	l.Cscli("machines", "add", "xdp-drop-self", "--password", "comeback-pass-word", "--force", "-f", filepath.Join(t.TempDir(), "creds.yaml"))
	key := l.AddBouncer("xdp-drop-self")
	ns := testns.New(t)
	p := ownersPlugin(l, key, 10*time.Minute)
	p.Bans.Detect.CrowdSecPush, p.Bans.Detect.CrowdSecLogin, p.Bans.Detect.CrowdSecPasswordFile = true, "xdp-drop-self", pwFile
	p.Bans.Detect.PushUnverified = true // a UDP flood: unverified
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitOrigin(t, ns, p, OriginCrowdSec, "the first pull", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	floodUntilBanned(t, ns, p, "10.2.2.2")
	waitOrigin(t, ns, p, OriginCrowdSec, "the ban back from the LAPI", func(f map[string]any) bool { return field(f, FieldActive) == 1 })
	detected := banCounterOf(t, p, bpf.BanOriginDetect, bpf.BanDrop)

	sendBanFlows(t, ns, banFlow{"10.2.2.2", 8000, 0}, banFlow{"10.4.4.4", 100, 100})
	pts := originPoints(t, ns, p)
	cs, det := pts[OriginCrowdSec], pts[OriginDetect]
	require.Equal(t, int64(1), field(cs, FieldAdded), "the decision is the feed's own ban, once")
	require.Equal(t, int64(1), field(cs, FieldActive))
	require.Equal(t, int64(0), field(cs, FieldPackets), "each frame counted once, under detection")
	require.Equal(t, int64(1), field(det, FieldActive))
	require.Equal(t, int64(1), field(det, FieldAdded))
	require.Equal(t, int64(1), field(det, FieldPushed))
	require.Equal(t, detected+8000, banCounterOf(t, p, bpf.BanOriginDetect, bpf.BanDrop))
}
