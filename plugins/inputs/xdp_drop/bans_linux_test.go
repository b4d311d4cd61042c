//go:build linux

package xdp_drop

import (
	"bytes"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/serializers/influx"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// testBanInterval is the poll interval of the tests: short, so that they
// wait little; they never assert a time, only "within a deadline".
const testBanInterval = 300 * time.Millisecond

// banPlugin is a plugin on the test veth that drops GRE (which no test
// sends: every frame passes but for the bans) with bans fed by l.
func banPlugin(l *lapi.LAPI, key string, b *BansConfig) *XDPDrop {
	return banPluginAt(l.URL(), key, b)
}

// banPluginAt is banPlugin with the LAPI at url.
func banPluginAt(url, key string, b *BansConfig) *XDPDrop {
	if b == nil {
		b = &BansConfig{}
	}
	b.CrowdSec = &CrowdSecConfig{URL: url, APIKey: key, Interval: config.Duration(testBanInterval)}
	return withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"gre"}, Bans: b, Log: testutil.Logger{}})
}

// banPoint gathers once and returns the test veth's xdp_drop_ban point's
// fields and tags; it fails the test when there is not exactly one.
func banPoint(t *testing.T, ns *testns.NS, p *XDPDrop) (map[string]any, map[string]string) {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	var found []telegraf.Metric
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementBan && m.Tags()[TagInterface] == testns.Dev {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "one xdp_drop_ban point per attached interface")
	return found[0].Fields(), found[0].Tags()
}

// waitBans gathers until the ban point satisfies ok, and returns its
// fields; the deadline is generous: ok is what "within interval + one
// gather" comes to.
func waitBans(t *testing.T, ns *testns.NS, p *XDPDrop, what string, ok func(f map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for {
		f, _ := banPoint(t, ns, p)
		if ok(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; the last xdp_drop_ban fields: %v", what, testns.Hang, f)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// field is an integer field of a ban point.
func field(f map[string]any, name string) int64 {
	switch v := f[name].(type) {
	case int64:
		return v
	case uint64:
		return int64(v)
	}
	return -1
}

// banFlow is frames from one source and how many of them the stack must see.
type banFlow struct {
	src    string
	count  int
	passed int
}

func (f banFlow) frame() []byte { return ipFrame(f.src, "10.9.0.1", frames.ProtoUDP, 40000, 9) }

// sendBanFlows sends the flows through the peer and checks what reached
// the stack behind the veth, flow by flow, exactly.
func sendBanFlows(t *testing.T, ns *testns.NS, flows ...banFlow) {
	t.Helper()
	sendOn(t, ns, testns.Dev, ns.PeerIdx, flows...)
}

// sendOn is sendBanFlows on interface dev, whose peer is peer.
func sendOn(t *testing.T, ns *testns.NS, dev string, peer int, flows ...banFlow) {
	t.Helper()
	sock, err := ns.OpenPacketSocket(dev)
	require.NoError(t, err)
	defer sock.Close()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	passed := 0
	for _, f := range flows {
		require.NoError(t, ns.Do(func() error { return gen.Send(peer, f.frame(), f.count) }))
		passed += f.passed
	}
	seen, err := sock.Receive(passed, testns.Hang)
	require.NoError(t, err)
	for _, f := range flows {
		n := 0
		for _, s := range seen {
			if bytes.Equal(s, f.frame()) {
				n++
			}
		}
		require.Equal(t, f.passed, n, "frames from %s that reached the stack", f.src)
	}
}

// TestBansCrowdSec runs the plugin against a real LAPI: a banned range
// with an allow-listed part, a banned address, a decision added and one
// deleted while it runs, and one that expires, each checked by the frames
// that reach the stack behind the veth and by the xdp_drop_ban point.
func TestBansCrowdSec(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	l.AddDecision("198.51.100.7", time.Hour)
	l.AddDecision("2001:db8:bad::/48", time.Hour)
	ns := testns.New(t)
	p := banPlugin(l, key, &BansConfig{AllowPrefix: []string{"203.0.113.128/25"}})
	require.Empty(t, startPlugin(t, ns, p).Errors)

	f := waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 3 })
	require.Positive(t, field(f, FieldSynced))
	require.Equal(t, int64(3), field(f, FieldAdded))
	sendBanFlows(t, ns,
		banFlow{"203.0.113.5", 7, 0},      // in the banned range
		banFlow{"203.0.113.200", 5, 5},    // in its allowed part
		banFlow{"198.51.100.7", 3, 0},     // the banned address
		banFlow{"198.51.100.8", 4, 4},     // beside it
		banFlow{"2001:db8:bad::9", 2, 0},  // in the banned IPv6 range
		banFlow{"2001:db8:900d::9", 6, 6}, // not banned
	)
	frameLen := uint64(len(banFlow{src: "203.0.113.5"}.frame()))
	frameLen6 := uint64(len(banFlow{src: "2001:db8:bad::9"}.frame()))
	f, tags := banPoint(t, ns, p)
	require.Equal(t, map[string]string{"interface": testns.Dev, "origin": "crowdsec", "action": "drop"}, tags)
	require.Equal(t, uint64(12), f[FieldPackets])
	require.Equal(t, 10*frameLen+2*frameLen6, f[FieldBytes])
	require.NotContains(t, f, FieldError)

	// Added while running: in force within the interval and a gather.
	l.AddDecision("192.0.2.99", time.Hour)
	waitBans(t, ns, p, "a decision added while running", func(f map[string]any) bool { return field(f, FieldActive) == 4 })
	sendBanFlows(t, ns, banFlow{"192.0.2.99", 6, 0}, banFlow{"192.0.2.98", 1, 1})

	// Deleted while running: lifted likewise.
	l.DeleteDecision("198.51.100.7")
	f = waitBans(t, ns, p, "a decision deleted while running", func(f map[string]any) bool { return field(f, FieldActive) == 3 })
	require.Equal(t, int64(1), field(f, FieldRemoved))
	sendBanFlows(t, ns, banFlow{"198.51.100.7", 3, 3})

	// One that expires: dropped, then past its end passed, and swept.
	l.AddDecision("198.51.100.50", 4*time.Second)
	waitBans(t, ns, p, "a short decision in force", func(f map[string]any) bool { return field(f, FieldActive) == 4 })
	sendBanFlows(t, ns, banFlow{"198.51.100.50", 2, 0})
	f = waitBans(t, ns, p, "the short decision expired", func(f map[string]any) bool { return field(f, FieldExpired) == 1 })
	require.Equal(t, int64(3), field(f, FieldActive))
	sendBanFlows(t, ns, banFlow{"198.51.100.50", 2, 2})

	f, _ = banPoint(t, ns, p)
	require.Equal(t, uint64(20), f[FieldPackets], "12, 6 from the added ban and 2 before the short one expired")
	require.Equal(t, int64(5), field(f, FieldAdded))
	require.Equal(t, int64(1), field(f, FieldRemoved))
	require.Equal(t, int64(1), field(f, FieldExpired))
	require.Equal(t, int64(0), field(f, FieldRefused))
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	ser := &influx.Serializer{}
	require.NoError(t, ser.Init())
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementBan {
			line, err := ser.Serialize(m)
			require.NoError(t, err)
			t.Logf("%s", line)
		}
	}
}

// TestBansDryRun: with bans.dry_run the frames of a banned source are
// counted would_drop and reach the stack.
func TestBansDryRun(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	ns := testns.New(t)
	p := banPlugin(l, key, &BansConfig{DryRun: true})
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 1 })
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 9, 9}, banFlow{"198.51.100.1", 4, 4})
	f, tags := banPoint(t, ns, p)
	require.Equal(t, "would_drop", tags[TagAction])
	require.Equal(t, uint64(9), f[FieldPackets])
	require.Equal(t, uint64(9*len(banFlow{src: "203.0.113.5"}.frame())), f[FieldBytes])
	require.Equal(t, testns.Dev, tags[TagInterface])
}
