//go:build linux

package flowspec

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// TestFlood: UPDATEs as fast as the peer can send them: the set is
// applied debounced and never concurrently; the receiver tracks max_rules
// accepted and 4×max_rules refused rules (the newest); past 5×max_rules
// paths GoBGP resets the session (CEASE, maximum number of prefixes).
func TestFlood(t *testing.T) {
	_, port, accept := startRawPeer(t)
	a := &applied{}
	r, err := Start(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), MaxRules: 4, OnlyLocalDestinations: true,
		LocalPrefixes: func() []netip.Prefix {
			return []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("192.0.2.2/24")}
		},
		Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.3"), Port: port, PeerAS: 65000}},
		Log:   logTo(t),
	}, a.apply)
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	p := accept()
	waitUp(t, r, 10*time.Second, nil)

	start := time.Now()
	for i := 1; i <= 20; i++ {
		p.announce(1, [][8]byte{discardEC}, nlri(dst4(fmt.Sprintf("192.0.2.%d", i), 32)))
	}
	waitFor(t, 2*time.Second, "every rule received", func() bool { return r.Peers()[0].Received == 20 })
	set := a.waitRules(t, time.Second, 2)
	require.Equal(t, "192.0.2.1/32", set[0].Dst.Prefix.String())
	require.Equal(t, "192.0.2.2/32", set[1].Dst.Prefix.String())
	st := r.Rules()
	require.Len(t, st, 2+16, "2 accepted, the 16 newest of 18 refused")
	require.Equal(t, "destination 192.0.2.5/32 then discard", st[2].Text)
	require.Equal(t, "destination 192.0.2.20/32 then discard", st[17].Text)
	require.Equal(t, map[string]int{ReasonOnlyLocal: 18}, r.Peers()[0].Refused)
	a.mu.Lock()
	calls := a.calls
	a.mu.Unlock()
	require.LessOrEqual(t, calls, int(time.Since(start)/debounce)+2, "applied more often than every %v", debounce)
	require.False(t, a.concurrent.Load(), "apply called concurrently")

	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.21", 32)))
	select {
	case n := <-p.notified:
		require.Equal(t, [2]byte{6, 1}, n, "CEASE, maximum number of prefixes reached")
	case <-time.After(5 * time.Second):
		t.Fatal("no NOTIFICATION past 5×max_rules paths")
	}
	a.waitRules(t, time.Second, 0)
}

// TestAdopt: handed-over rules stay in force until the peer's End-of-RIB
// (sent by a peer with graceful restart), or a quiet second of a peer
// without, then only the re-announced ones remain; with no peer up they go
// at the hold/graceful-restart deadline.
func TestAdopt(t *testing.T) {
	other := withID(bpf.FlowRule{Dst: pfx("192.0.2.99/32"), Action: bpf.FlowDrop}, "destination 192.0.2.99/32 then discard")
	t.Run("end-of-rib", func(t *testing.T) {
		g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true, gracefulSec: 30})
		g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
		r, a := startReceiver(t, g, nil) // the deadline is 120 s away
		r.Adopt([]bpf.FlowRule{other, ntpFlowRule()})
		waitFor(t, 10*time.Second, "only the re-announced rule", func() bool {
			set := a.last()
			return len(set) == 1 && set[0].ID == ntpFlowRule().ID
		})
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, set := range a.sets {
			ids := map[string]bool{}
			for _, x := range set {
				ids[x.ID] = true
			}
			require.True(t, ids[ntpFlowRule().ID], "a set without the rule in force: %v", set)
		}
	})
	t.Run("quiet", func(t *testing.T) {
		// No graceful restart: no End-of-RIB. The peer's table counts as
		// sent once its session is up and a second passes without UPDATEs,
		// long before the deadline (120 s).
		g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
		g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
		r, a := startReceiver(t, g, nil)
		r.Adopt([]bpf.FlowRule{other, ntpFlowRule()})
		waitUp(t, r, 15*time.Second, g)
		up := time.Now()
		waitFor(t, 5*time.Second, "only the re-announced rule", func() bool {
			set := a.last()
			return len(set) == 1 && set[0].ID == ntpFlowRule().ID
		})
		t.Logf("adoption ended %v after the session came up", time.Since(up).Round(10*time.Millisecond))
		require.Equal(t, []RuleState{{Rule: ntpFlowRule(), Text: ntpText, Peer: netip.MustParseAddr("127.0.0.2")}}, r.Rules())
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, set := range a.sets {
			ids := map[string]bool{}
			for _, x := range set {
				ids[x.ID] = true
			}
			require.True(t, ids[ntpFlowRule().ID], "a set without the rule in force: %v", set)
		}
	})
	t.Run("text", func(t *testing.T) {
		// Adopted rules report the text they were handed over with.
		a := &applied{}
		r, err := Start(Config{
			LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
			Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.5"), Port: freePort(t, "127.0.0.5"), PeerAS: 65000}},
			Log:   logTo(t),
		}, a.apply)
		require.NoError(t, err)
		t.Cleanup(r.Stop)
		handed := other
		handed.Text = "destination 192.0.2.99/32 then discard (handed over)"
		r.Adopt([]bpf.FlowRule{handed})
		waitFor(t, 2*time.Second, "the adopted rule listed", func() bool { return len(r.Rules()) == 1 })
		require.Equal(t, handed.Text, r.Rules()[0].Text)
		require.Equal(t, handed, r.Rules()[0].Rule)
	})
	t.Run("deadline", func(t *testing.T) {
		a := &applied{}
		r, err := Start(Config{
			LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"), HoldTime: 3 * time.Second, RestartTime: 3 * time.Second,
			Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.5"), Port: freePort(t, "127.0.0.5"), PeerAS: 65000}},
			Log:   logTo(t),
		}, a.apply)
		require.NoError(t, err)
		t.Cleanup(r.Stop)
		r.Adopt([]bpf.FlowRule{other})
		a.waitRules(t, 6*time.Second, 0)
		a.mu.Lock()
		defer a.mu.Unlock()
		require.Len(t, a.sets, 1, "one apply: the empty set at the deadline")
	})
}
