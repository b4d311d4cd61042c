package flowspec

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func rec(r bpf.FlowRule) *received { return &received{rule: r, comps: encodeComponents(&r)} }

func eq(v uint64) bpf.FlowComponent { return bpf.FlowComponent{{Op: bpf.FlowEQ, Value: v}} }

// TestOrder: RFC 8955 §5.1 (and RFC 8956 §4 for offsets), pair by pair:
// first has precedence over second, and not the other way round.
func TestOrder(t *testing.T) {
	d := func(s string) *bpf.FlowPrefix { return &bpf.FlowPrefix{Prefix: netip.MustParsePrefix(s)} }
	cases := []struct {
		name          string
		first, second bpf.FlowRule
	}{
		{"more specific prefix first", bpf.FlowRule{Dst: d("10.1.0.0/16")}, bpf.FlowRule{Dst: d("10.0.0.0/8")}},
		{"more specific host first", bpf.FlowRule{Dst: d("192.0.2.10/32")}, bpf.FlowRule{Dst: d("192.0.2.0/24")}},
		{"lower prefix value first, shorter or not", bpf.FlowRule{Dst: d("10.0.0.0/8")}, bpf.FlowRule{Dst: d("192.168.1.0/24")}},
		{"lower value of equal length", bpf.FlowRule{Dst: d("192.0.2.1/32")}, bpf.FlowRule{Dst: d("192.0.2.2/32")}},
		{"a destination before none", bpf.FlowRule{Dst: d("203.0.113.0/24")}, bpf.FlowRule{Proto: eq(6)}},
		{"lower type first: source before protocol", bpf.FlowRule{Src: d("203.0.113.0/24")}, bpf.FlowRule{Proto: eq(6)}},
		{"equal destination, then source", bpf.FlowRule{Dst: d("192.0.2.0/24"), Src: d("198.51.100.0/24")}, bpf.FlowRule{Dst: d("192.0.2.0/24"), Proto: eq(6)}},
		{"equal destination, more specific source", bpf.FlowRule{Dst: d("192.0.2.0/24"), Src: d("198.51.100.7/32")}, bpf.FlowRule{Dst: d("192.0.2.0/24"), Src: d("198.51.100.0/24")}},
		{"memcmp: lower value", bpf.FlowRule{Proto: eq(6)}, bpf.FlowRule{Proto: eq(17)}},
		{"memcmp: operator byte first (an OR list without end bit)",
			bpf.FlowRule{Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 17}, {Op: bpf.FlowEQ, Value: 6}}}, bpf.FlowRule{Proto: eq(6)}},
		{"memcmp: shorter value encoding first (1 octet before 2)", bpf.FlowRule{DstPort: eq(80)}, bpf.FlowRule{DstPort: eq(443)}},
		{"memcmp: the operator octet decides first (== before >=)", bpf.FlowRule{PacketLength: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 200}}},
			bpf.FlowRule{PacketLength: bpf.FlowComponent{{Op: bpf.FlowGT | bpf.FlowEQ, Value: 100}}}},
		{"equal protocol, then a port", bpf.FlowRule{Proto: eq(17), SrcPort: eq(123)}, bpf.FlowRule{Proto: eq(17)}},
		{"ipv6: lower offset first", bpf.FlowRule{IPv6: true, Dst: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("2001:db8::/64")}},
			bpf.FlowRule{IPv6: true, Dst: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("0:db8::/64"), Offset: 16}}},
		{"ipv6: equal offset, more specific first", bpf.FlowRule{IPv6: true, Dst: d("2001:db8::10/128")}, bpf.FlowRule{IPv6: true, Dst: d("2001:db8::/64")}},
		{"ipv6: flow label, lower value first", bpf.FlowRule{IPv6: true, FlowLabel: eq(5)}, bpf.FlowRule{IPv6: true, FlowLabel: eq(7)}},
		{"ipv4 before ipv6", bpf.FlowRule{Proto: eq(17)}, bpf.FlowRule{IPv6: true, Dst: d("2001:db8::10/128")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Negative(t, compareRules(rec(c.first), rec(c.second)))
			require.Positive(t, compareRules(rec(c.second), rec(c.first)))
			require.Zero(t, compareRules(rec(c.first), rec(c.first)))
		})
	}
}

// TestCompareBytes: memcmp over the common part; equal there, the longer first.
func TestCompareBytes(t *testing.T) {
	require.Negative(t, compareBytes([]byte{1, 2}, []byte{1, 3}))
	require.Negative(t, compareBytes([]byte{1, 2, 0}, []byte{1, 2}))
	require.Positive(t, compareBytes([]byte{1, 2}, []byte{1, 2, 0}))
	require.Zero(t, compareBytes([]byte{1, 2}, []byte{1, 2}))
}

// TestEncodeComponents: the wire bytes a rule is ordered by.
func TestEncodeComponents(t *testing.T) {
	r := ntpFlowRule()
	c := encodeComponents(&r)
	require.Equal(t, []byte{32, 192, 0, 2, 10}, c[1])
	require.Equal(t, []byte{0x81, 17}, c[3])
	require.Equal(t, []byte{0x81, 123}, c[6])
	require.Equal(t, []byte{0x93, 0x01, 0x90}, c[10])
	v6 := bpf.FlowRule{IPv6: true, Dst: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("0:db8::/32"), Offset: 16},
		DstPort: bpf.FlowComponent{{Op: bpf.FlowGT | bpf.FlowEQ, Value: 1024}, {Op: bpf.FlowAnd | bpf.FlowLT | bpf.FlowEQ, Value: 70000}}}
	c = encodeComponents(&v6)
	require.Equal(t, []byte{32, 16, 0, 0, 0x0d, 0xb8}, c[1])
	require.Equal(t, []byte{0x13, 0x04, 0x00, 0xc5 | 0x20, 0, 1, 0x11, 0x70}, c[5])
}

// TestTextAndID: the canonical text of each action, and the ID its hash.
func TestTextAndID(t *testing.T) {
	r := ntpFlowRule()
	require.Equal(t, ntpText, canonicalText(&r, nil))
	sum := sha256.Sum256([]byte(ntpText))
	require.Equal(t, hex.EncodeToString(sum[:])[:12], r.ID)

	cases := []struct {
		rule bpf.FlowRule
		text string
	}{
		{bpf.FlowRule{Proto: eq(17), Action: bpf.FlowLimit, Rate: 1000}, "protocol ==17 then rate-limit 1000 pps"},
		{bpf.FlowRule{Proto: eq(17), Action: bpf.FlowLimit, Rate: 125000.5, RateBytes: true}, "protocol ==17 then rate-limit 125000.5 bytes"},
		{bpf.FlowRule{TCPFlags: bpf.FlowComponent{{Op: bpf.FlowMatch | bpf.FlowNot, Value: 0x12}, {Op: bpf.FlowAnd, Value: 0x100}}},
			"tcp-flags !=SA&0x100 then accept"},
		{bpf.FlowRule{Fragment: bpf.FlowComponent{{Op: 0, Value: bpf.FlowFragDF | bpf.FlowFragLF}}, Sample: true, Continue: true},
			"fragment dont-fragment+last-fragment then sample continue"},
		{bpf.FlowRule{Port: bpf.FlowComponent{{Op: bpf.FlowLT | bpf.FlowGT | bpf.FlowEQ}, {Op: 0, Value: 1}}, Action: bpf.FlowDrop},
			"port true false then discard"},
		{bpf.FlowRule{IPv6: true, Dst: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("0:db8::/64"), Offset: 16}, FlowLabel: eq(5), Action: bpf.FlowDrop},
			"ipv6 destination 0:db8::/64 offset 16 label ==5 then discard"},
	}
	for _, c := range cases {
		require.Equal(t, c.text, canonicalText(&c.rule, nil))
	}
}
