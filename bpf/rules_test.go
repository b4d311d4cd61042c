//go:build linux

package bpf_test

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func ports(rs ...bpf.PortRange) []bpf.PortRange { return rs }

func port(p uint16) bpf.PortRange { return bpf.PortRange{Lo: p, Hi: p} }

// ruleFrame describes an IP frame for the rule table.
type ruleFrame struct {
	src, dst string // addresses, both of one family
	proto    uint8
	sport    uint16
	dport    uint16
	tags     []frames.Tag
	v6ext    bool // hop-by-hop and destination options in front (IPv6)
	frag     int  // 0: whole; 1: first fragment; 2: later fragment
}

// l4 is the upper-layer header of f, with its ports where it has them.
func (f ruleFrame) l4() []byte {
	switch f.proto {
	case frames.ProtoTCP:
		return frames.Ports(frames.TCP(8), f.sport, f.dport)
	case frames.ProtoUDP, frames.ProtoSCTP:
		return frames.Ports(frames.UDP(8), f.sport, f.dport)
	}
	return frames.ICMPEcho(false, 8)
}

func (f ruleFrame) build() []byte {
	src, dst := netip.MustParseAddr(f.src), netip.MustParseAddr(f.dst)
	if src.Is4() {
		l3 := frames.IPv4(f.proto, 0, f.l4())
		switch f.frag {
		case 1:
			l3[6] |= 0x20 // more fragments, offset 0
		case 2:
			l3[6], l3[7] = 0x00, 0x40 // offset 64 bytes: the "ports" are payload
		}
		return frames.Ether(frames.EtherIPv4, frames.Addressed(l3, src, dst), f.tags...)
	}
	payload, next := f.l4(), f.proto
	switch f.frag {
	case 1:
		payload, next = frames.Frag(next, 0, true, payload), frames.ProtoFragment
	case 2:
		payload, next = frames.Frag(next, 8, false, payload), frames.ProtoFragment
	}
	if f.v6ext {
		payload = frames.Ext(frames.ProtoDstOpts, next, 8, payload)
		payload = frames.Ext(frames.ProtoHopOpts, frames.ProtoDstOpts, 16, payload)
		next = frames.ProtoHopOpts
	}
	return frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(next, payload), src, dst), f.tags...)
}

func (f ruleFrame) class() bpf.Class {
	if netip.MustParseAddr(f.src).Is4() {
		return bpf.IPv4Class(f.proto)
	}
	return bpf.IPv6Class(f.proto)
}

type ruleCase struct {
	name  string
	frame []byte
	class bpf.Class
	rule  string // the rule that decides, "" for none
	drop  bool   // the action the frame gets
}

type ruleSet struct {
	name   string
	policy bpf.Policy
	cases  []ruleCase
}

func rc(name string, f ruleFrame, rule string, drop bool) ruleCase {
	return ruleCase{name: name, frame: f.build(), class: f.class(), rule: rule, drop: drop}
}

// reflection is the shipped example: allow management, shed memcached
// reflection, let DNS to the resolver through a UDP drop list.
func reflection() bpf.Policy {
	return bpf.Policy{
		Protocols: []uint8{frames.ProtoUDP},
		Rules: []bpf.Rule{
			{Name: "mgmt", SrcPrefixes: prefixes("192.0.2.0/24", "2001:db8:1::/48")},
			{Name: "memcached-reflection", Drop: true, Protocols: []uint8{frames.ProtoUDP}, SrcPorts: ports(port(11211))},
			{Name: "dns-to-resolver", Protocols: []uint8{frames.ProtoUDP, frames.ProtoTCP}, DstPrefixes: prefixes("198.51.100.53/32"), DstPorts: ports(port(53))},
		},
	}
}

func reflectionCases() []ruleCase {
	const udp, tcp, icmp = frames.ProtoUDP, frames.ProtoTCP, frames.ProtoICMP
	const out, resolver = "203.0.113.5", "198.51.100.53"
	q := frames.Tag{TPID: frames.Ether8021Q, VID: 10}
	ad := frames.Tag{TPID: frames.Ether8021AD, VID: 20}
	return []ruleCase{
		rc("mgmt before memcached", ruleFrame{src: "192.0.2.7", dst: resolver, proto: udp, sport: 11211, dport: 53}, "mgmt", false),
		rc("memcached", ruleFrame{src: out, dst: resolver, proto: udp, sport: 11211, dport: 9}, "memcached-reflection", true),
		rc("memcached before dns", ruleFrame{src: out, dst: resolver, proto: udp, sport: 11211, dport: 53}, "memcached-reflection", true),
		rc("udp no rule", ruleFrame{src: out, dst: resolver, proto: udp, sport: 11212, dport: 9}, "", true),
		rc("dns udp", ruleFrame{src: out, dst: resolver, proto: udp, sport: 40000, dport: 53}, "dns-to-resolver", false),
		rc("dns tcp", ruleFrame{src: out, dst: resolver, proto: tcp, sport: 40000, dport: 53}, "dns-to-resolver", false),
		rc("dns other host", ruleFrame{src: out, dst: "198.51.100.54", proto: udp, sport: 40000, dport: 53}, "", true),
		rc("dns other port", ruleFrame{src: out, dst: resolver, proto: udp, sport: 40000, dport: 54}, "", true),
		rc("tcp other host", ruleFrame{src: out, dst: "198.51.100.54", proto: tcp, sport: 40000, dport: 53}, "", false),
		rc("icmp no rule", ruleFrame{src: out, dst: resolver, proto: icmp}, "", false),
		rc("icmp mgmt", ruleFrame{src: "192.0.2.9", dst: resolver, proto: icmp}, "mgmt", false),
		rc("ipv6 mgmt", ruleFrame{src: "2001:db8:1:ffff::5", dst: "2001:db8:9::1", proto: udp, sport: 11211, dport: 9}, "mgmt", false),
		rc("ipv6 outside mgmt", ruleFrame{src: "2001:db8:2::5", dst: "2001:db8:9::1", proto: udp, sport: 11211, dport: 9}, "memcached-reflection", true),
		rc("ipv6 dns to a v4-only rule", ruleFrame{src: "2001:db8:2::5", dst: "2001:db8:9::1", proto: udp, sport: 1, dport: 53}, "", true),
		rc("ipv4 first fragment", ruleFrame{src: out, dst: resolver, proto: udp, sport: 11211, dport: 9, frag: 1}, "memcached-reflection", true),
		rc("ipv4 later fragment", ruleFrame{src: out, dst: resolver, proto: udp, sport: 11211, dport: 9, frag: 2}, "", true),
		rc("ipv4 later fragment mgmt", ruleFrame{src: "192.0.2.7", dst: resolver, proto: udp, sport: 11211, dport: 9, frag: 2}, "mgmt", false),
		rc("ipv4 later fragment dns", ruleFrame{src: out, dst: resolver, proto: udp, sport: 40000, dport: 53, frag: 2}, "", true),
		rc("ipv6 first fragment", ruleFrame{src: "2001:db8:2::5", dst: "2001:db8:9::1", proto: udp, sport: 11211, dport: 9, frag: 1}, "memcached-reflection", true),
		rc("ipv6 later fragment", ruleFrame{src: "2001:db8:2::5", dst: "2001:db8:9::1", proto: udp, sport: 11211, dport: 9, frag: 2}, "", true),
		rc("vlan memcached", ruleFrame{src: out, dst: resolver, proto: udp, sport: 11211, dport: 9, tags: []frames.Tag{q}}, "memcached-reflection", true),
		rc("qinq mgmt", ruleFrame{src: "192.0.2.7", dst: resolver, proto: udp, sport: 1, dport: 9, tags: []frames.Tag{ad, q}}, "mgmt", false),
		rc("qinq dns", ruleFrame{src: out, dst: resolver, proto: udp, sport: 1, dport: 53, tags: []frames.Tag{ad, q}}, "dns-to-resolver", false),
		rc("ipv6 ext memcached", ruleFrame{src: "2001:db8:2::5", dst: "2001:db8:9::1", proto: udp, sport: 11211, dport: 9, v6ext: true}, "memcached-reflection", true),
		rc("ipv6 ext and first fragment", ruleFrame{src: "2001:db8:2::5", dst: "2001:db8:9::1", proto: udp, sport: 11211, dport: 9, v6ext: true, frag: 1}, "memcached-reflection", true),
		rc("ipv6 vlan ext mgmt", ruleFrame{src: "2001:db8:1::1", dst: "2001:db8:9::1", proto: tcp, sport: 22, dport: 22, v6ext: true, tags: []frames.Tag{q}}, "mgmt", false),
		{name: "arp", frame: frames.Ether(frames.EtherARP, frames.ARPRequest()), class: bpf.ClassL2ARP},
		{name: "ipv4 truncated", frame: frames.Ether(frames.EtherIPv4, frames.Pad(19)), class: bpf.ClassIPv4Truncated},
	}
}

// overlap has prefixes inside each other in different rules, an AND of
// prefix and port, and port ranges, under a pass-all default.
func overlap() bpf.Policy {
	return bpf.Policy{
		Rules: []bpf.Rule{
			{Name: "host", Drop: true, SrcPrefixes: prefixes("10.1.2.3/32")},
			{Name: "narrow-tcp", Protocols: []uint8{frames.ProtoTCP}, SrcPrefixes: prefixes("10.1.0.0/16", "2001:db8:aa::/48")},
			{Name: "wide", Drop: true, SrcPrefixes: prefixes("10.0.0.0/8", "2001:db8::/32")},
			{Name: "v4-dst", Drop: true, DstPrefixes: prefixes("192.0.2.0/24")},
			{Name: "and", Protocols: []uint8{frames.ProtoUDP}, SrcPrefixes: prefixes("172.16.0.0/12"), DstPorts: ports(port(53))},
			{Name: "range", Drop: true, Protocols: []uint8{frames.ProtoUDP, frames.ProtoSCTP}, DstPorts: ports(bpf.PortRange{Lo: 1000, Hi: 1999}, port(3000))},
			{Name: "src-range", Drop: true, Protocols: []uint8{frames.ProtoTCP}, SrcPorts: ports(bpf.PortRange{Lo: 0, Hi: 1}, port(65535)), DstPorts: ports(port(80))},
		},
	}
}

func overlapCases() []ruleCase {
	const udp, tcp, sctp = frames.ProtoUDP, frames.ProtoTCP, frames.ProtoSCTP
	const dst = "198.51.100.1"
	cases := []ruleCase{
		rc("longest prefix first rule", ruleFrame{src: "10.1.2.3", dst: dst, proto: tcp}, "host", true),
		rc("middle prefix", ruleFrame{src: "10.1.9.9", dst: dst, proto: tcp}, "narrow-tcp", false),
		rc("middle prefix wrong protocol: shorter prefix", ruleFrame{src: "10.1.9.9", dst: dst, proto: udp}, "wide", true),
		rc("shortest prefix", ruleFrame{src: "10.200.0.1", dst: dst, proto: tcp}, "wide", true),
		rc("outside every prefix", ruleFrame{src: "11.0.0.1", dst: dst, proto: tcp}, "", false),
		rc("ipv6 middle prefix", ruleFrame{src: "2001:db8:aa::1", dst: "2001:db8:ff::1", proto: tcp}, "narrow-tcp", false),
		rc("ipv6 shorter prefix", ruleFrame{src: "2001:db8:aa::1", dst: "2001:db8:ff::1", proto: udp}, "wide", true),
		rc("ipv6 outside", ruleFrame{src: "2001:db9::1", dst: "2001:db8:ff::1", proto: udp}, "", false),
		rc("v4 destination", ruleFrame{src: "11.0.0.1", dst: "192.0.2.200", proto: tcp}, "v4-dst", true),
		rc("and both", ruleFrame{src: "172.16.1.1", dst: dst, proto: udp, dport: 53}, "and", false),
		rc("and prefix only", ruleFrame{src: "172.16.1.1", dst: dst, proto: udp, dport: 54}, "", false),
		rc("and port only", ruleFrame{src: "172.32.0.1", dst: dst, proto: udp, dport: 53}, "", false),
		rc("and wrong protocol", ruleFrame{src: "172.16.1.1", dst: dst, proto: tcp, dport: 53}, "", false),
		rc("src range low edge", ruleFrame{src: "11.0.0.1", dst: dst, proto: tcp, sport: 0, dport: 80}, "src-range", true),
		rc("src range high edge", ruleFrame{src: "11.0.0.1", dst: dst, proto: tcp, sport: 1, dport: 80}, "src-range", true),
		rc("src range past high edge", ruleFrame{src: "11.0.0.1", dst: dst, proto: tcp, sport: 2, dport: 80}, "", false),
		rc("src port 65535", ruleFrame{src: "11.0.0.1", dst: dst, proto: tcp, sport: 65535, dport: 80}, "src-range", true),
		rc("src port 65535 other dst", ruleFrame{src: "11.0.0.1", dst: dst, proto: tcp, sport: 65535, dport: 81}, "", false),
	}
	for _, e := range []struct {
		port  uint16
		match bool
	}{{999, false}, {1000, true}, {1001, true}, {1998, true}, {1999, true}, {2000, false}, {2999, false}, {3000, true}, {3001, false}, {0, false}, {65535, false}} {
		rule := ""
		if e.match {
			rule = "range"
		}
		cases = append(cases,
			rc("udp dst port "+itoa(e.port), ruleFrame{src: "11.0.0.1", dst: dst, proto: udp, sport: 1000, dport: e.port}, rule, e.match),
			rc("sctp ipv6 dst port "+itoa(e.port), ruleFrame{src: "2001:db9::1", dst: "2001:db9::2", proto: sctp, sport: 1000, dport: e.port}, rule, e.match))
	}
	return cases
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// allowList is an allow-list in front of drop-all.
func allowList() bpf.Policy {
	return bpf.Policy{
		DropAll: true,
		Rules: []bpf.Rule{
			{Name: "mgmt", SrcPrefixes: prefixes("192.0.2.0/24")},
			{Name: "ssh", Protocols: []uint8{frames.ProtoTCP}, DstPorts: ports(port(22))},
		},
	}
}

func allowListCases() []ruleCase {
	const tcp, udp = frames.ProtoTCP, frames.ProtoUDP
	return []ruleCase{
		rc("mgmt udp", ruleFrame{src: "192.0.2.1", dst: "198.51.100.1", proto: udp, dport: 9}, "mgmt", false),
		rc("ssh", ruleFrame{src: "203.0.113.1", dst: "198.51.100.1", proto: tcp, dport: 22}, "ssh", false),
		rc("ssh ipv6", ruleFrame{src: "2001:db8::1", dst: "2001:db8::2", proto: tcp, dport: 22}, "ssh", false),
		rc("http", ruleFrame{src: "203.0.113.1", dst: "198.51.100.1", proto: tcp, dport: 80}, "", true),
		rc("udp 22", ruleFrame{src: "203.0.113.1", dst: "198.51.100.1", proto: udp, dport: 22}, "", true),
		{name: "arp", frame: frames.Ether(frames.EtherARP, frames.ARPRequest()), class: bpf.ClassL2ARP, drop: true},
	}
}

// deep nests nine IPv4 prefixes of eight lengths beyond 16 bits in one
// bucket (10.0/16: more lengths than a bucket lists, so the trie serves
// it), two in another (10.1/16: exact matches), under a /8, with a shorter
// prefix's rule before a longer one's.
func deep() bpf.Policy {
	rule := func(name string, drop bool, p string) bpf.Rule {
		return bpf.Rule{Name: name, Drop: drop, SrcPrefixes: prefixes(p)}
	}
	return bpf.Policy{Rules: []bpf.Rule{
		rule("l32", true, "10.0.0.1/32"), rule("l30", false, "10.0.0.0/30"), rule("l28", true, "10.0.0.0/28"),
		rule("l26", false, "10.0.0.0/26"), rule("l24", true, "10.0.0.0/24"), rule("l20", true, "10.0.0.0/20"),
		rule("l22", false, "10.0.0.0/22"), rule("l18", false, "10.0.0.0/18"), rule("b1-30", true, "10.1.2.4/30"),
		rule("b1-24", false, "10.1.2.0/24"), rule("l8", true, "10.0.0.0/8"),
		rule("v6-64", true, "2001:db8:0:1::/64"), rule("v6-32", false, "2001:db8::/32"), rule("v6-12", true, "2000::/12"),
	}}
}

func deepCases() []ruleCase {
	const udp = frames.ProtoUDP
	c := func(src, rule string, drop bool) ruleCase {
		dst := "198.51.100.1"
		if strings.Contains(src, ":") {
			dst = "2001:db8:ff::1"
		}
		return rc(src, ruleFrame{src: src, dst: dst, proto: udp}, rule, drop)
	}
	return []ruleCase{
		c("10.0.0.1", "l32", true), c("10.0.0.2", "l30", false), c("10.0.0.5", "l28", true),
		c("10.0.0.17", "l26", false), c("10.0.0.65", "l24", true), c("10.0.1.1", "l20", true),
		c("10.0.16.1", "l18", false), c("10.0.64.1", "l8", true), c("10.1.2.5", "b1-30", true),
		c("10.1.2.9", "b1-24", false), c("10.1.3.1", "l8", true), c("10.255.0.1", "l8", true),
		c("11.0.0.1", "", false), c("9.255.255.255", "", false),
		c("2001:db8:0:1::5", "v6-64", true), c("2001:db8:0:2::5", "v6-32", false), c("2001:db9::1", "v6-12", true),
		c("2010::1", "", false),
	}
}

func ruleSets() []ruleSet {
	dry := reflection()
	dry.DryRun = true
	return []ruleSet{
		{"reflection", reflection(), reflectionCases()},
		{"dry run", dry, reflectionCases()},
		{"overlap", overlap(), overlapCases()},
		{"allow-list", allowList(), allowListCases()},
		{"deep prefixes", deep(), deepCases()},
	}
}

// TestRules runs hand-built frames through programs with rules: the
// verdict, and that exactly the frame's class under its action and the
// deciding rule counted it.
func TestRules(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, set := range ruleSets() {
		t.Run(set.name, func(t *testing.T) {
			p, err := bpf.Load(set.policy)
			require.NoError(t, err)
			defer p.Close()
			runRuleCases(t, p, set.policy, set.cases)
		})
	}
}

// TestRulesMultiBuffer runs the same table through the multi-buffer program.
func TestRulesMultiBuffer(t *testing.T) {
	testns.RequirePrivileged(t)
	set := ruleSets()[2]
	p, err := bpf.Load(set.policy)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.UseMultiBuffer())
	runRuleCases(t, p, set.policy, set.cases)
}

func runRuleCases(t *testing.T, p *bpf.Program, policy bpf.Policy, cases []ruleCase) {
	t.Helper()
	index := map[string]int{}
	for i, r := range policy.Rules {
		index[r.Name] = i
	}
	var before, after bpf.Block
	for _, c := range cases {
		require.NoError(t, p.ReadBlock(&before), c.name)
		verdict, err := p.XDP().Run(&ebpf.RunOptions{Data: c.frame})
		require.NoError(t, err, c.name)
		require.NoError(t, p.ReadBlock(&after), c.name)

		want := uint32(xdpPass)
		if c.drop && !policy.DryRun {
			want = xdpDrop
		}
		require.Equal(t, want, verdict, "%s: verdict", c.name)

		expect := before
		action := bpf.ActionPass
		if c.drop {
			action = bpf.ActionDrop
		}
		expect.Class[c.class][action].Packets++
		expect.Class[c.class][action].Bytes += uint64(len(c.frame))
		if c.rule != "" {
			i, ok := index[c.rule]
			require.True(t, ok, c.rule)
			expect.Rule[i].Packets++
			expect.Rule[i].Bytes += uint64(len(c.frame))
		}
		require.Equal(t, expect.Rule, after.Rule, "%s: rule counters", c.name)
		require.Equal(t, expect.Class, after.Class, "%s: class counters (class %d, action %d)", c.name, c.class, action)
	}
}
