//go:build linux

package bpf_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// TestFlowSpecCapacity: a set whose last IPv4 rules need more classes than
// the family's tables hold (max_rules 64: 16 x 64 + 64 = 1,088) puts in
// force the longest prefix that fits and names exactly the rules left out,
// in order; the IPv6 rules, which fit, are all in force; a later set that
// fits applies whole. Each tcp-flags rule needs one bit set: n such rules
// take 2^n classes of the 12 bits, so ten (1,024 classes) fit and the
// eleventh (2,048) does not.
func TestFlowSpecCapacity(t *testing.T) {
	r := loadFlow(t, bpf.Policy{FlowSpec: bpf.FlowSpecConfig{MaxRules: 64}})
	bit := func(i int) bpf.FlowRule {
		return bpf.FlowRule{ID: fmt.Sprintf("bit%d", i), TCPFlags: bpf.FlowComponent{{Op: bpf.FlowMatch, Value: 1 << i}}, Action: bpf.FlowDrop}
	}
	var rules []bpf.FlowRule
	for i := range 10 {
		rules = append(rules, bit(i))
	}
	v6 := bpf.FlowRule{ID: "v6", IPv6: true, Proto: eq(17), Action: bpf.FlowDrop}
	udp := bpf.FlowRule{ID: "udp", Proto: eq(17), Action: bpf.FlowDrop}
	rules = append(rules, v6, bit(10), bit(11), udp)

	err := r.table.Set(rules)
	var capErr *bpf.FlowCapacityError
	require.True(t, errors.As(err, &capErr), "%v", err)
	require.Equal(t, []string{"bit10", "bit11", "udp"}, capErr.Refused)
	require.Equal(t, `3 FlowSpec rules not enforced (the last ones of their family, from "bit10" on): `+
		`3 of IPv4: with them the family would need more than 1088 distinct classes of values; the rules before them are in force`, err.Error())
	require.Equal(t, rules[:11], r.table.Rules())

	tcp := func(flags uint16) flowWire {
		w := udp4("198.51.100.1", "192.0.2.10", 4000, 80, 60)
		w.proto, w.tcpFlags = frames.ProtoTCP, flags
		return w
	}
	u4 := udp4("198.51.100.1", "192.0.2.10", 4000, 53, 60)
	u6 := u4
	u6.v6, u6.src, u6.dst = true, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	for i := range 10 {
		require.Equal(t, xdpDrop, r.run(tcp(1<<i)), "bit %d, in force", i)
	}
	require.Equal(t, xdpPass, r.run(tcp(1<<10)), "bit 10, refused")
	require.Equal(t, xdpPass, r.run(tcp(1<<11)), "bit 11, refused")
	require.Equal(t, xdpPass, r.run(u4), "udp, refused")
	require.Equal(t, xdpDrop, r.run(u6), "v6, in force")
	c := r.counts()
	require.Len(t, c, 11)
	require.Equal(t, uint64(1), c["bit9"].DroppedPackets)
	require.Equal(t, uint64(1), c["v6"].DroppedPackets)

	// The bits past 9 withdrawn: the rest fits and applies whole.
	fits := append(append([]bpf.FlowRule{}, rules[:11]...), udp)
	require.NoError(t, r.table.Set(fits))
	require.Equal(t, fits, r.table.Rules())
	require.Equal(t, xdpDrop, r.run(u4), "udp, in force")
	require.Equal(t, xdpDrop, r.run(tcp(1<<3)))
	require.Equal(t, xdpPass, r.run(tcp(1<<10)))
	require.Equal(t, uint64(1), r.counts()["udp"].DroppedPackets)
}

// TestFlowSpecLabelCapacity: an IPv6 set needing more flow label
// boundaries than the tables hold (2,047) keeps the rules before the one
// that passes the limit; the error says so.
func TestFlowSpecLabelCapacity(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	var rules []bpf.FlowRule
	// Rule i: label == 2i+1, two boundaries each: 1,023 rules take 2,046.
	for i := range 1024 {
		rules = append(rules, bpf.FlowRule{ID: fmt.Sprintf("l%d", i), IPv6: true, FlowLabel: eq(uint64(2*i + 1)), Action: bpf.FlowDrop})
	}
	err := r.table.Set(rules)
	var capErr *bpf.FlowCapacityError
	require.True(t, errors.As(err, &capErr), "%v", err)
	require.Equal(t, []string{"l1023"}, capErr.Refused)
	require.Contains(t, err.Error(), "1 of IPv6: with them the family would need more than 2047 flow label boundaries")
	w := udp4("2001:db8::1", "2001:db8::2", 4000, 53, 60)
	w.v6 = true
	for _, i := range []int{0, 1022, 1023} {
		w.label = uint32(2*i + 1)
		want := xdpDrop
		if i == 1023 {
			want = xdpPass
		}
		require.Equal(t, want, r.run(w), "label rule %d", i)
	}
	require.Len(t, r.table.Rules(), 1023)
}
