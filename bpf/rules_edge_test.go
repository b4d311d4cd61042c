//go:build linux

package bpf_test

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// edges: IPv4 options in front of the ports, a header cut short of the
// ports, default routes, and a rule whose prefixes of its two directions
// are of different families.
func edges() bpf.Policy {
	return bpf.Policy{Rules: []bpf.Rule{
		{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53))},
		{Name: "cross", Drop: true, SrcPrefixes: prefixes("203.0.113.0/24"), DstPrefixes: prefixes("2001:db8::/32")},
		{Name: "any4", SrcPrefixes: prefixes("0.0.0.0/0"), Protocols: []uint8{frames.ProtoUDP}},
		{Name: "any6", Drop: true, SrcPrefixes: prefixes("::/0")},
	}}
}

func edgeFrame(optLen int, l4 []byte, src, dst string) []byte {
	l3 := frames.IPv4(frames.ProtoUDP, optLen, l4)
	return frames.Ether(frames.EtherIPv4, frames.Addressed(l3, netip.MustParseAddr(src), netip.MustParseAddr(dst)))
}

func edgeCases() []ruleCase {
	udp := bpf.IPv4Class(frames.ProtoUDP)
	return []ruleCase{
		{"options dns", edgeFrame(12, frames.Ports(frames.UDP(8), 1, 53), "203.0.113.1", "198.51.100.1"), udp, "dns", true},
		{"options other port", edgeFrame(12, frames.Ports(frames.UDP(8), 53, 54), "203.0.113.1", "198.51.100.1"), udp, "any4", false},
		{"cut short of ports", edgeFrame(0, []byte{0, 53}, "203.0.113.1", "198.51.100.1"), udp, "any4", false},
		rc("v6 any", ruleFrame{src: "2001:db8::1", dst: "2001:db8::2", proto: frames.ProtoTCP, sport: 1, dport: 2}, "any6", true),
		rc("v6 udp dns", ruleFrame{src: "2001:db8::1", dst: "2001:db8::2", proto: frames.ProtoUDP, sport: 1, dport: 53, v6ext: true, frag: 1}, "dns", true),
		rc("v6 later frag", ruleFrame{src: "2001:db8::1", dst: "2001:db8::2", proto: frames.ProtoUDP, sport: 1, dport: 53, v6ext: true, frag: 2}, "any6", true),
		rc("v4 later frag", ruleFrame{src: "203.0.113.9", dst: "198.51.100.1", proto: frames.ProtoUDP, sport: 1, dport: 53, frag: 2}, "any4", false),
	}
}

func TestRuleEdges(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, multi := range []bool{false, true} {
		p, err := bpf.Load(edges())
		require.NoError(t, err)
		if multi {
			require.NoError(t, p.UseMultiBuffer())
		}
		runRuleCases(t, p, edges(), edgeCases())
		p.Close()
	}
}

// TestRuleSixtyFour: the last of 64 rules decides and counts.
func TestRuleSixtyFour(t *testing.T) {
	testns.RequirePrivileged(t)
	var policy bpf.Policy
	for i := range bpf.MaxRules {
		policy.Rules = append(policy.Rules, bpf.Rule{Name: "r" + strconv.Itoa(i), Drop: i%2 == 1,
			Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(uint16(1000 + i))), SrcPrefixes: prefixes("10." + strconv.Itoa(i) + ".0.0/16")})
	}
	var cases []ruleCase
	for _, i := range []int{0, 1, 62, 63} {
		src := "10." + strconv.Itoa(i) + ".1.1"
		cases = append(cases, rc("rule "+strconv.Itoa(i), ruleFrame{src: src, dst: "198.51.100.1", proto: frames.ProtoUDP, sport: 1, dport: uint16(1000 + i)}, "r"+strconv.Itoa(i), i%2 == 1))
		cases = append(cases, rc("miss "+strconv.Itoa(i), ruleFrame{src: src, dst: "198.51.100.1", proto: frames.ProtoUDP, sport: 1, dport: uint16(1001 + i)}, "", false))
	}
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	defer p.Close()
	runRuleCases(t, p, policy, cases)
}
