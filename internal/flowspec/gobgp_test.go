//go:build linux

package flowspec

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

const ntpRule = "match destination 192.0.2.10/32 protocol udp source-port ==123 packet-length >=400 then discard"

func ntpFlowRule() bpf.FlowRule {
	r := bpf.FlowRule{
		Dst:          &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("192.0.2.10/32")},
		Proto:        bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 17}},
		SrcPort:      bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 123}},
		PacketLength: bpf.FlowComponent{{Op: bpf.FlowGT | bpf.FlowEQ, Value: 400}},
		Action:       bpf.FlowDrop,
	}
	r.ID, r.Text = ruleID(ntpText), ntpText
	return r
}

const ntpText = "destination 192.0.2.10/32 protocol ==17 source-port ==123 packet-length >=400 then discard"

// TestGobgpdAnnounceWithdraw: gobgpd's NTP rule arrives as the exact
// FlowRule within 1 s, and its withdrawal empties the set within 1 s.
func TestGobgpdAnnounceWithdraw(t *testing.T) {
	g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	r, a := startReceiver(t, g, nil)
	waitUp(t, r, 15*time.Second, g)

	g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
	rules := a.waitRules(t, time.Second, 1)
	require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, rules)
	st := r.Rules()
	require.Len(t, st, 1)
	require.Equal(t, ntpText, st[0].Text)
	require.Equal(t, "", st[0].Refused)
	require.Equal(t, netip.MustParseAddr("127.0.0.2"), st[0].Peer)
	ps := r.Peers()
	require.Len(t, ps, 1)
	require.Equal(t, "established", ps[0].State)
	require.Equal(t, 1, ps[0].Received)
	require.Equal(t, 1, ps[0].Accepted)
	require.False(t, ps[0].LastUpdate.IsZero())

	g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "del"}, fields(ntpRule)...)...)
	a.waitRules(t, time.Second, 0)
	require.Empty(t, r.Rules())
}

func pfx(s string) *bpf.FlowPrefix { return &bpf.FlowPrefix{Prefix: netip.MustParsePrefix(s)} }

// withID sets the rule's text and its ID from it.
func withID(r bpf.FlowRule, text string) bpf.FlowRule {
	r.ID, r.Text = ruleID(text), text
	return r
}

// TestGobgpdActionsAndComponents: every action gobgp can send and the
// components and operators it encodes arrive as exact rules, or refused
// with their reason and counted.
func TestGobgpdActionsAndComponents(t *testing.T) {
	g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	r, a := startReceiver(t, g, func(c *Config) {
		c.OnlyLocalDestinations = true
		c.LocalPrefixes = func() []netip.Prefix {
			l := []netip.Prefix{netip.MustParsePrefix("2001:db8::10/64")}
			for i := 10; i <= 17; i++ {
				l = append(l, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 24))
			}
			return l
		}
	})
	waitUp(t, r, 15*time.Second, g)

	cases := []struct {
		family, rule string
		text         string
		want         bpf.FlowRule // without ID
		refused      string
	}{
		{"ipv4-flowspec", "match destination 192.0.2.10/32 then rate-limit 1000",
			"destination 192.0.2.10/32 then rate-limit 1000 bytes",
			bpf.FlowRule{Dst: pfx("192.0.2.10/32"), Action: bpf.FlowLimit, Rate: 1000, RateBytes: true}, ""},
		{"ipv4-flowspec", "match destination 192.0.2.11/32 then discard action sample",
			"destination 192.0.2.11/32 then discard sample",
			bpf.FlowRule{Dst: pfx("192.0.2.11/32"), Action: bpf.FlowDrop, Sample: true}, ""},
		{"ipv4-flowspec", "match destination 192.0.2.12/32 then action terminal",
			"destination 192.0.2.12/32 then continue",
			bpf.FlowRule{Dst: pfx("192.0.2.12/32"), Continue: true}, ""},
		{"ipv4-flowspec", "match destination 192.0.2.17/32 then action sample-terminal",
			"destination 192.0.2.17/32 then sample continue",
			bpf.FlowRule{Dst: pfx("192.0.2.17/32"), Sample: true, Continue: true}, ""},
		{"ipv4-flowspec", "match destination 192.0.2.13/32 then redirect 65000:100",
			"destination 192.0.2.13/32 then redirect 65000:100",
			bpf.FlowRule{Dst: pfx("192.0.2.13/32")}, ReasonAction},
		{"ipv4-flowspec", "match destination 192.0.2.14/32 then discard mark 10",
			"destination 192.0.2.14/32 then discard mark 10",
			bpf.FlowRule{Dst: pfx("192.0.2.14/32"), Action: bpf.FlowDrop}, ReasonAction},
		{"ipv4-flowspec", "match destination 192.0.2.15/32 destination-port >=1024&<=2048 ==80 tcp-flags =S !A fragment =is-fragment dscp ==46 then discard",
			"destination 192.0.2.15/32 destination-port >=1024&<=2048 ==80 tcp-flags =S !A dscp ==46 fragment =is-fragment then discard",
			bpf.FlowRule{Dst: pfx("192.0.2.15/32"),
				DstPort:  bpf.FlowComponent{{Op: bpf.FlowGT | bpf.FlowEQ, Value: 1024}, {Op: bpf.FlowAnd | bpf.FlowLT | bpf.FlowEQ, Value: 2048}, {Op: bpf.FlowEQ, Value: 80}},
				TCPFlags: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: 0x02}, {Op: bpf.FlowNot, Value: 0x10}},
				DSCP:     bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 46}},
				Fragment: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: bpf.FlowFragIsF}},
				Action:   bpf.FlowDrop}, ""},
		{"ipv4-flowspec", "match destination 192.0.2.16/32 protocol icmp icmp-type ==8 icmp-code ==0 source 198.51.100.0/24 port !=53 packet-length <100 then discard",
			"destination 192.0.2.16/32 source 198.51.100.0/24 protocol ==1 port !=53 icmp-type ==8 icmp-code ==0 packet-length <100 then discard",
			bpf.FlowRule{Dst: pfx("192.0.2.16/32"), Src: pfx("198.51.100.0/24"),
				Proto:        bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 1}},
				Port:         bpf.FlowComponent{{Op: bpf.FlowLT | bpf.FlowGT, Value: 53}},
				ICMPType:     bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 8}},
				ICMPCode:     bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 0}},
				PacketLength: bpf.FlowComponent{{Op: bpf.FlowLT, Value: 100}},
				Action:       bpf.FlowDrop}, ""},
		{"ipv4-flowspec", "match destination 198.51.100.1/32 protocol udp then discard",
			"destination 198.51.100.1/32 protocol ==17 then discard",
			bpf.FlowRule{Dst: pfx("198.51.100.1/32"), Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 17}}, Action: bpf.FlowDrop}, ReasonOnlyLocal},
		{"ipv4-flowspec", "match protocol udp source-port ==19 then discard",
			"protocol ==17 source-port ==19 then discard",
			bpf.FlowRule{Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 17}}, SrcPort: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 19}}, Action: bpf.FlowDrop}, ""},
		{"ipv6-flowspec", "match destination 2001:db8::10/128 protocol tcp destination-port ==80 then discard",
			"ipv6 destination 2001:db8::10/128 protocol ==6 destination-port ==80 then discard",
			bpf.FlowRule{IPv6: true, Dst: pfx("2001:db8::10/128"), Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 6}},
				DstPort: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 80}}, Action: bpf.FlowDrop}, ""},
		{"ipv6-flowspec", "match destination 2001:db8::/64 16 protocol tcp label ==5 then discard",
			"ipv6 destination 0:db8::/64 offset 16 protocol ==6 label ==5 then discard",
			bpf.FlowRule{IPv6: true, Dst: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("0:db8::/64"), Offset: 16},
				Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 6}}, FlowLabel: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 5}}, Action: bpf.FlowDrop}, ReasonUnsupported},
		{"ipv6-flowspec", "match destination 2001:db8::/64 0 protocol tcp label ==5 then discard",
			"ipv6 destination 2001:db8::/64 protocol ==6 label ==5 then discard",
			bpf.FlowRule{IPv6: true, Dst: pfx("2001:db8::/64"),
				Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 6}}, FlowLabel: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 5}}, Action: bpf.FlowDrop}, ""},
		{"ipv6-flowspec", "match source 2001:db8:77::/48 8 then discard",
			"ipv6 source 1:db8:77::/48 offset 8 then discard",
			bpf.FlowRule{IPv6: true, Src: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("1:db8:77::/48"), Offset: 8}, Action: bpf.FlowDrop}, ReasonUnsupported},
		{"ipv6-flowspec", "match destination 2001:db8:1::1/128 then discard",
			"ipv6 destination 2001:db8:1::1/128 then discard",
			bpf.FlowRule{IPv6: true, Dst: pfx("2001:db8:1::1/128"), Action: bpf.FlowDrop}, ReasonOnlyLocal},
	}
	for _, c := range cases {
		g.cli(append([]string{"global", "rib", "-a", c.family, "add"}, fields(c.rule)...)...)
	}
	waitFor(t, 2*time.Second, "every rule received", func() bool { return len(r.Rules()) == len(cases) })
	states := map[string]RuleState{}
	for _, s := range r.Rules() {
		states[s.Text] = s
	}
	var accepted, refusedAction, refusedLocal, refusedUnsupported int
	for _, c := range cases {
		s, ok := states[c.text]
		require.True(t, ok, "rule %q not received as %q; got %v", c.rule, c.text, r.Rules())
		require.Equal(t, withID(c.want, c.text), s.Rule, c.text)
		require.Equal(t, c.refused, s.Refused, c.text)
		switch c.refused {
		case "":
			accepted++
		case ReasonAction:
			refusedAction++
		case ReasonOnlyLocal:
			refusedLocal++
		case ReasonUnsupported:
			refusedUnsupported++
		}
	}
	set := a.waitRules(t, time.Second, accepted)
	for i := 1; i < len(set); i++ {
		x, y := &received{rule: set[i-1], comps: encodeComponents(&set[i-1])}, &received{rule: set[i], comps: encodeComponents(&set[i])}
		require.Negative(t, compareRules(x, y), "applied out of order: %s before %s", set[i-1].ID, set[i].ID)
	}
	ps := r.Peers()[0]
	require.Equal(t, len(cases), ps.Received)
	require.Equal(t, accepted, ps.Accepted)
	require.Equal(t, map[string]int{ReasonAction: refusedAction, ReasonOnlyLocal: refusedLocal, ReasonUnsupported: refusedUnsupported}, ps.Refused)
	require.Equal(t, 2, refusedUnsupported, "the two rules with an IPv6 prefix offset")
}

// TestGobgpdMaxRules: past max_rules in a family the newest rule is
// refused; a withdrawal makes room for it.
func TestGobgpdMaxRules(t *testing.T) {
	g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	r, a := startReceiver(t, g, func(c *Config) { c.MaxRules = 2 })
	waitUp(t, r, 15*time.Second, g)
	add := func(op, dst string) {
		g.cli("global", "rib", "-a", "ipv4-flowspec", op, "match", "destination", dst, "then", "discard")
	}
	add("add", "192.0.2.1/32")
	a.waitRules(t, time.Second, 1)
	add("add", "192.0.2.2/32")
	a.waitRules(t, time.Second, 2)
	add("add", "192.0.2.3/32")
	waitFor(t, time.Second, "third rule received", func() bool { return len(r.Rules()) == 3 })
	st := r.Rules()
	require.Equal(t, "destination 192.0.2.3/32 then discard", st[2].Text)
	require.Equal(t, ReasonMaxRules, st[2].Refused)
	require.Len(t, a.last(), 2)
	require.Equal(t, map[string]int{ReasonMaxRules: 1}, r.Peers()[0].Refused)

	add("del", "192.0.2.1/32")
	waitFor(t, time.Second, "the refused rule accepted", func() bool {
		set := a.last()
		return len(set) == 2 && set[0].Dst.Prefix.String() == "192.0.2.2/32" && set[1].Dst.Prefix.String() == "192.0.2.3/32"
	})
	require.Empty(t, r.Peers()[0].Refused)
}

// TestGobgpdSessionDown: without graceful restart a session that ends
// withdraws its rules at once (the peer killed), and a peer that goes
// silent withdraws them after the hold time.
func TestGobgpdSessionDown(t *testing.T) {
	for _, how := range []string{"killed", "silent"} {
		t.Run(how, func(t *testing.T) {
			g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true, holdTime: 3})
			r, a := startReceiver(t, g, func(c *Config) { c.HoldTime = 3 * time.Second })
			waitUp(t, r, 15*time.Second, g)
			g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
			a.waitRules(t, time.Second, 1)
			if how == "killed" {
				g.kill()
				a.waitRules(t, time.Second, 0)
			} else {
				g.signal(syscall.SIGSTOP)
				// The hold time (3 s) runs from the last keepalive.
				a.waitRules(t, 5*time.Second, 0)
			}
			require.False(t, r.Peers()[0].Up)
			require.Empty(t, r.Rules())
		})
	}
}

// TestGobgpdGracefulRestart: with graceful restart negotiated, the rules of
// a peer whose session ends stay while its restart timer runs, then go.
func TestGobgpdGracefulRestart(t *testing.T) {
	const restart = 4 // seconds, gobgpd's restart time
	g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true, gracefulSec: restart})
	r, a := startReceiver(t, g, nil)
	waitUp(t, r, 15*time.Second, g)
	g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
	a.waitRules(t, time.Second, 1)

	g.kill()
	waitFor(t, 2*time.Second, "peer down", func() bool { return !r.Peers()[0].Up })
	require.Len(t, a.last(), 1, "the rule stays while the restart timer runs")
	time.Sleep(time.Second)
	require.Len(t, a.last(), 1, "the rule stays while the restart timer runs")
	require.Len(t, r.Rules(), 1)
	a.waitRules(t, (restart+2)*time.Second, 0)
}

// TestGobgpdPassive: a passive peer: gobgpd connects to the receiver.
func TestGobgpdPassive(t *testing.T) {
	port := freePort(t, "127.0.0.1")
	g := startGobgpd(t, "127.0.0.2", false, gobgpNeighbor{addr: "127.0.0.1", as: 65001, remotePort: port})
	r, a := startReceiver(t, g, func(c *Config) {
		c.Peers = []Peer{{Address: netip.MustParseAddr("127.0.0.2"), Port: port, PeerAS: 65000, Passive: true}}
	})
	waitUp(t, r, 15*time.Second, g)
	g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
	require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, a.waitRules(t, time.Second, 1))
}

// TestGobgpdPassword: a TCP MD5 password on both sides makes the session;
// a different one keeps it from being made (the segments are dropped).
func TestGobgpdPassword(t *testing.T) {
	t.Run("same", func(t *testing.T) {
		g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true, password: "s3cret"})
		r, a := startReceiver(t, g, func(c *Config) { c.Peers[0].Password = "s3cret" })
		waitUp(t, r, 15*time.Second, g)
		g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
		require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, a.waitRules(t, time.Second, 1))
	})
	t.Run("different", func(t *testing.T) {
		g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true, password: "s3cret"})
		r, _ := startReceiver(t, g, func(c *Config) { c.Peers[0].Password = "other" })
		time.Sleep(4 * time.Second)
		require.False(t, r.Peers()[0].Up)
		require.NotEqual(t, "established", r.Peers()[0].State)
	})
}

// capacityErr is the engine's *bpf.FlowCapacityError as the receiver sees it.
type capacityErr struct{ ids []string }

func (e *capacityErr) Error() string        { return fmt.Sprintf("no room for %d rules", len(e.ids)) }
func (e *capacityErr) RefusedIDs() []string { return e.ids }

// TestCapacity: rules the engine has no room for are refused as capacity
// (counted, in Rules()), the rest stay in force; a withdrawal passes the
// whole set again and the rule left out gets in.
func TestCapacity(t *testing.T) {
	g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	var mu sync.Mutex
	var sets [][]bpf.FlowRule
	apply := func(rules []bpf.FlowRule) error {
		mu.Lock()
		defer mu.Unlock()
		sets = append(sets, append([]bpf.FlowRule(nil), rules...))
		if len(rules) <= 2 { // the engine's room
			return nil
		}
		var ids []string
		for _, x := range rules[2:] {
			ids = append(ids, x.ID)
		}
		return fmt.Errorf("flow table: %w", &capacityErr{ids})
	}
	r, err := Start(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr(g.addr), Port: g.port, PeerAS: 65000}},
		Log:   logTo(t),
	}, apply)
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	waitUp(t, r, 15*time.Second, g)
	add := func(op, dst string) {
		g.cli("global", "rib", "-a", "ipv4-flowspec", op, "match", "destination", dst, "then", "discard")
	}
	text := func(dst string) string { return "destination " + dst + " then discard" }
	// Most specific first (§5.1): the /26 is the one the engine leaves out.
	add("add", "192.0.2.1/32")
	add("add", "192.0.2.2/32")
	add("add", "192.0.2.0/26")
	waitFor(t, 2*time.Second, "the third rule refused", func() bool {
		st := r.Rules()
		return len(st) == 3 && st[2].Refused == ReasonCapacity
	})
	st := r.Rules()
	require.Equal(t, []string{text("192.0.2.1/32"), text("192.0.2.2/32"), text("192.0.2.0/26")}, []string{st[0].Text, st[1].Text, st[2].Text})
	require.Equal(t, []string{"", "", ReasonCapacity}, []string{st[0].Refused, st[1].Refused, st[2].Refused})
	ps := r.Peers()[0]
	require.Equal(t, 3, ps.Received)
	require.Equal(t, 2, ps.Accepted)
	require.Equal(t, map[string]int{ReasonCapacity: 1}, ps.Refused)
	mu.Lock()
	n := len(sets)
	require.Len(t, sets[n-1], 3, "the whole set is passed")
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	require.Len(t, sets, n, "no retry while the set is unchanged")
	mu.Unlock()

	add("del", "192.0.2.1/32")
	waitFor(t, time.Second, "the refused rule in", func() bool {
		st := r.Rules()
		return len(st) == 2 && st[0].Refused == "" && st[1].Refused == ""
	})
	mu.Lock()
	last := sets[len(sets)-1]
	mu.Unlock()
	require.Equal(t, []string{text("192.0.2.2/32"), text("192.0.2.0/26")}, []string{last[0].Text, last[1].Text})
	require.Empty(t, r.Peers()[0].Refused)
	require.Equal(t, 2, r.Peers()[0].Accepted)
}

// TestTwoPeers: the same NLRI from two peers is one rule; withdrawn by one
// it stays in force from the other, without a set lacking it; withdrawn
// by both it goes.
func TestTwoPeers(t *testing.T) {
	g1 := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	g2 := startGobgpd(t, "127.0.0.6", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	r, a := startReceiver(t, g1, func(c *Config) {
		c.Peers = append(c.Peers, Peer{Address: netip.MustParseAddr(g2.addr), Port: g2.port, PeerAS: 65000})
	})
	waitUp(t, r, 15*time.Second, nil)
	ntp := append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)
	del := append([]string{"global", "rib", "-a", "ipv4-flowspec", "del"}, fields(ntpRule)...)
	g1.cli(ntp...)
	g2.cli(ntp...)
	waitFor(t, 2*time.Second, "both received", func() bool {
		ps := r.Peers()
		return ps[0].Received == 1 && ps[1].Received == 1
	})
	require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, a.waitRules(t, time.Second, 1))
	require.Len(t, r.Rules(), 1)
	for _, p := range r.Peers() {
		require.Equal(t, 1, p.Accepted, p.Address)
	}

	g1.cli(del...)
	waitFor(t, 2*time.Second, "withdrawn by 127.0.0.2", func() bool { return r.Peers()[0].Received == 0 })
	time.Sleep(300 * time.Millisecond) // past a debounce: a recomputed set would be applied
	st := r.Rules()
	require.Len(t, st, 1)
	require.Equal(t, netip.MustParseAddr("127.0.0.6"), st[0].Peer)
	require.Equal(t, 1, r.Peers()[1].Accepted)
	a.mu.Lock()
	for _, set := range a.sets {
		require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, set, "a set without the rule in force")
	}
	a.mu.Unlock()

	g2.cli(del...)
	a.waitRules(t, time.Second, 0)
	require.Empty(t, r.Rules())
}

// TestTwoPeersActions: one NLRI from two peers, from one with an action the
// host refuses (redirect), from the other with discard: the discard is in
// force whichever arrives first and whichever GoBGP picks as best, the
// refusal is counted for the redirecting peer alone, and withdrawing either
// path leaves exactly what the other says.
func TestTwoPeersActions(t *testing.T) {
	base := "match destination 192.0.2.10/32 protocol udp source-port ==123 packet-length >=400 then "
	for _, redirectFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("redirect first %v", redirectFirst), func(t *testing.T) {
			g1 := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
			g2 := startGobgpd(t, "127.0.0.6", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
			r, a := startReceiver(t, g1, func(c *Config) {
				c.Peers = append(c.Peers, Peer{Address: netip.MustParseAddr(g2.addr), Port: g2.port, PeerAS: 65000})
			})
			waitUp(t, r, 15*time.Second, nil)
			rib := func(g *gobgpd, op, then string) {
				g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", op}, fields(base+then)...)...)
			}
			received := func(n1, n2 int) {
				waitFor(t, 3*time.Second, fmt.Sprintf("received %d and %d", n1, n2), func() bool {
					ps := r.Peers()
					return ps[0].Received == n1 && ps[1].Received == n2
				})
				time.Sleep(300 * time.Millisecond) // past a debounce: a recomputed set would be applied
			}
			// g1 (127.0.0.2) redirects, g2 (127.0.0.6) discards.
			if redirectFirst {
				rib(g1, "add", "redirect 65000:100")
				received(1, 0)
				require.Empty(t, a.last())
				rib(g2, "add", "discard")
			} else {
				rib(g2, "add", "discard")
				a.waitRules(t, 2*time.Second, 1)
				rib(g1, "add", "redirect 65000:100")
			}
			received(1, 1)
			require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, a.last())
			st := r.Rules()
			require.Len(t, st, 1)
			require.Equal(t, "", st[0].Refused)
			require.Equal(t, netip.MustParseAddr("127.0.0.6"), st[0].Peer)
			ps := r.Peers()
			require.Equal(t, 0, ps[0].Accepted)
			require.Equal(t, 1, ps[0].Refused[ReasonAction])
			require.Equal(t, 1, ps[1].Accepted)
			require.Equal(t, 0, ps[1].Refused[ReasonAction])
			a.mu.Lock()
			for _, set := range a.sets[1:] {
				require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, set, "a set without the discard")
			}
			a.mu.Unlock()

			// The redirect withdrawn: the discard stays.
			rib(g1, "del", "redirect 65000:100")
			received(0, 1)
			require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, a.last())
			require.Equal(t, 0, r.Peers()[0].Refused[ReasonAction])
			// The redirect again, then the discard withdrawn: nothing in force,
			// the redirect refused.
			rib(g1, "add", "redirect 65000:100")
			received(1, 1)
			require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, a.last())
			rib(g2, "del", "discard")
			a.waitRules(t, time.Second, 0)
			received(1, 0)
			require.Equal(t, 1, r.Peers()[0].Refused[ReasonAction])
			st = r.Rules()
			require.Len(t, st, 1)
			require.Equal(t, ReasonAction, st[0].Refused)
		})
	}
}
