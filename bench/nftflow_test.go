package main

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdp-drop/xdp_drop/bpf"
)

var ge, le = bpf.FlowGT | bpf.FlowEQ, bpf.FlowLT | bpf.FlowEQ

func eqc(vs ...uint64) bpf.FlowComponent {
	var c bpf.FlowComponent
	for _, v := range vs {
		c = append(c, bpf.FlowTerm{Op: bpf.FlowEQ, Value: v})
	}
	return c
}

func dst(s string) *bpf.FlowPrefix { return &bpf.FlowPrefix{Prefix: netip.MustParsePrefix(s)} }

// nftCases are rules of every kind the translator writes, with its lines.
var nftCases = []struct {
	name string
	rule bpf.FlowRule
	want []string
}{
	{"the done-test's rule", bpf.FlowRule{Dst: dst("192.0.2.10/32"), Proto: eqc(17), SrcPort: eqc(123),
		PacketLength: bpf.FlowComponent{{Op: ge, Value: 400}}, Action: bpf.FlowDrop},
		[]string{"ip daddr 192.0.2.10 udp sport 123 ip length >= 400 drop"}},
	{"a range and an OR list", bpf.FlowRule{Src: dst("198.51.100.0/24"), Proto: eqc(6), DstPort: eqc(80, 443),
		SrcPort:  bpf.FlowComponent{{Op: ge, Value: 1000}, {Op: bpf.FlowAnd | le, Value: 1999}},
		TCPFlags: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: 0x02}, {Op: bpf.FlowAnd | bpf.FlowNot | bpf.FlowMatch, Value: 0x10}},
		Action:   bpf.FlowDrop},
		[]string{"ip saddr 198.51.100.0/24 tcp dport { 80, 443 } tcp sport 1000-1999 tcp flags & 0x2 == 0x2 tcp flags & 0x10 != 0x10 drop"}},
	{"ports without a protocol: TCP or UDP", bpf.FlowRule{DstPort: eqc(53), Action: bpf.FlowDrop},
		[]string{"ip protocol { 6, 17 } th dport 53 drop"}},
	{"a protocol alone", bpf.FlowRule{Proto: eqc(47), Action: bpf.FlowDrop}, []string{"ip protocol 47 drop"}},
	{"not equal: the rest of the range", bpf.FlowRule{Proto: eqc(17), DstPort: bpf.FlowComponent{{Op: bpf.FlowLT | bpf.FlowGT, Value: 53}}, Action: bpf.FlowDrop},
		[]string{"udp dport { 0-52, 54-65535 } drop"}},
	{"either port: a line per direction", bpf.FlowRule{Proto: eqc(17), Port: eqc(11211), Action: bpf.FlowDrop},
		[]string{"udp sport 11211 drop", "udp dport 11211 drop"}},
	{"ICMP", bpf.FlowRule{Dst: dst("192.0.2.0/24"), ICMPType: eqc(8), Action: bpf.FlowDrop},
		[]string{"ip daddr 192.0.2.0/24 icmp type 8 drop"}},
	{"IPv6", bpf.FlowRule{IPv6: true, Dst: dst("2001:db8::/32"), Proto: eqc(17), SrcPort: eqc(123), DSCP: eqc(46), Action: bpf.FlowDrop},
		[]string{"ip6 daddr 2001:db8::/32 udp sport 123 ip6 dscp 46 drop"}},
	{"a rate limit, terminal", bpf.FlowRule{Proto: eqc(17), Action: bpf.FlowLimit, Rate: 1e6, RateBytes: true},
		[]string{"ip protocol 17 limit rate over 1000000 bytes/second drop", "ip protocol 17 accept"}},
	{"a rate limit, going on", bpf.FlowRule{Proto: eqc(17), Action: bpf.FlowLimit, Rate: 100, Continue: true},
		[]string{"ip protocol 17 limit rate over 100/second drop"}},
	{"accept, going on: counted", bpf.FlowRule{Proto: eqc(1), Action: bpf.FlowAccept, Continue: true},
		[]string{"ip protocol 1 counter"}},
	{"a component no value matches", bpf.FlowRule{Proto: eqc(17), DstPort: bpf.FlowComponent{{Op: bpf.FlowLT, Value: 10}, {Op: bpf.FlowAnd | bpf.FlowGT, Value: 20}}, Action: bpf.FlowDrop},
		nil},
	{"ports of a protocol without any", bpf.FlowRule{Proto: eqc(47), DstPort: eqc(53), Action: bpf.FlowDrop}, nil},
}

// Each rule translates into the lines a translator writes for it.
func TestNftRules(t *testing.T) {
	for _, tc := range nftCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nftRules(&tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// What nftables cannot say as the engine means it is refused, naming it.
func TestNftRulesRefused(t *testing.T) {
	for _, tc := range []struct {
		rule bpf.FlowRule
		want string
	}{
		{bpf.FlowRule{Fragment: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: bpf.FlowFragIsF}}}, "fragment"},
		{bpf.FlowRule{Sample: true}, "sample"},
		{bpf.FlowRule{IPv6: true, PacketLength: eqc(100)}, "IPv6 packet length"},
		{bpf.FlowRule{IPv6: true, Dst: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("::1:0:0:0/64"), Offset: 16}}, "offset"},
		{bpf.FlowRule{TCPFlags: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: 2}, {Op: bpf.FlowMatch, Value: 16}}}, "ORed"},
		{bpf.FlowRule{TCPFlags: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: 0x100}}}, "eight bits"},
	} {
		_, err := nftRules(&tc.rule)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.rule, err, tc.want)
		}
	}
	_, err := nftRuleset(nftChain{family: "inet", table: "t", chain: "c", hook: "prerouting"},
		[]bpf.FlowRule{{ID: "ok"}, {ID: "frag", Fragment: bpf.FlowComponent{{Value: 1}}}})
	if err == nil || !strings.Contains(err.Error(), "rule 1 (frag)") {
		t.Errorf("ruleset error %v, want one naming rule 1 (frag)", err)
	}
}

// componentRanges holds exactly the values the component matches, for
// random components of up to four terms over 16-bit values.
func TestComponentRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 0))
	ops := []uint8{bpf.FlowLT, bpf.FlowGT, bpf.FlowEQ, bpf.FlowLT | bpf.FlowEQ, bpf.FlowGT | bpf.FlowEQ, bpf.FlowLT | bpf.FlowGT, 0, 7}
	for k := 0; k < 300; k++ {
		var c bpf.FlowComponent
		for n := 1 + rng.IntN(4); len(c) < n; {
			op := ops[rng.IntN(len(ops))]
			if len(c) > 0 && rng.IntN(2) == 0 {
				op |= bpf.FlowAnd
			}
			v := uint64(rng.IntN(64)) // near values, so that terms overlap
			if rng.IntN(4) == 0 {
				v = []uint64{0, 65535, 65534, 1}[rng.IntN(4)]
			}
			c = append(c, bpf.FlowTerm{Op: op, Value: v})
		}
		ranges := componentRanges(c, 0xffff)
		in := make([]bool, 1<<16)
		for i, r := range ranges {
			if r[0] > r[1] || i > 0 && ranges[i-1][1]+1 >= r[0] {
				t.Fatalf("%v: ranges %v not sorted, disjoint and apart", c, ranges)
			}
			for v := r[0]; v <= r[1]; v++ {
				in[v] = true
			}
		}
		for v := range in {
			if in[v] != c.Match(uint64(v), false) {
				t.Fatalf("%v: value %d in ranges %v = %v, Match = %v", c, v, ranges, in[v], !in[v])
			}
		}
	}
}

// The bench's set: the frame under test matches no rule, or the last one
// only, by the shared matcher; every rule translates into one nft rule.
func TestBenchFlowRules(t *testing.T) {
	for _, n := range []int{64, 1024} {
		rules := benchFlowRules(n)
		last := rules[n-1].Dst.Prefix.Addr()
		for i := range rules {
			if rules[i].Matches(flowFrameOf(flowMissDst)) {
				t.Errorf("%d rules: rule %d matches the frame meant to match none", n, i)
			}
			if got, want := rules[i].Matches(flowFrameOf(last)), i == n-1; got != want {
				t.Errorf("%d rules: rule %d matches the last rule's frame: %v, want %v", n, i, got, want)
			}
			if err := bpf.FlowExpressible(&rules[i]); err != nil {
				t.Errorf("%d rules: rule %d: %v", n, i, err)
			}
			if !flowDstRange.Contains(rules[i].Dst.Prefix.Addr()) {
				t.Errorf("rule %d: destination %s outside %s", i, rules[i].Dst.Prefix, flowDstRange)
			}
		}
		text, err := nftRuleset(nftChain{family: "netdev", table: "t", chain: "c", hook: "ingress", device: "xdpt0"}, rules)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(text, " drop\n"); got != n {
			t.Errorf("%d rules: %d nft rules", n, got)
		}
		if want := "\t\tip daddr " + last.String() + " udp sport 123 ip length >= 400 drop\n\t}\n}\n"; !strings.HasSuffix(text, want) {
			t.Errorf("%d rules: the ruleset ends\n%s\nwant\n%s", n, text[len(text)-120:], want)
		}
	}
	if f := flowFrame(flowMissDst); len(f) != 14+468 {
		t.Errorf("frame of %d bytes, want 482", len(f))
	}
}
