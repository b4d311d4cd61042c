//go:build linux

package bpf

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestFlowSpecHandedOver: the FlowSpec maps go to the successor with the
// ban maps; its program drops the rule's frames from its first frame, its
// Rules() are the predecessor's, and a Set through it changes the
// predecessor's program's verdict too (the same maps); slots kept, so
// counting goes on. The rules' canonical text travels with them.
func TestFlowSpecHandedOver(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := Policy{FlowSpec: FlowSpecConfig{On: true, MaxRules: 64}}
	old := NewInstance(policy)
	defer old.Close()
	p, err := old.loadFresh()
	require.NoError(t, err)
	defer p.Close()
	rules := []FlowRule{
		{ID: "a", Text: "protocol ==17 then discard", Proto: FlowComponent{{Op: FlowEQ, Value: 17}}, Action: FlowDrop},
		{ID: "b", IPv6: true, Text: "destination ::1:0:0/96-64 then discard", Dst: &FlowPrefix{Prefix: netip.MustParsePrefix("::1:0:0/96"), Offset: 64}, Action: FlowDrop},
	}
	require.NoError(t, old.FlowSpec().Set(rules))
	udp := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("192.0.2.1")))
	v6 := frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoTCP, frames.TCP(8)), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:aa:bb::1:2:3")))
	require.Equal(t, 0, passed(t, p, udp, 3))
	require.Equal(t, 0, passed(t, p, v6, 2))

	h := handOffAll(t, old, banMapCount+flowMapCount)
	next := NewInstance(policy)
	defer next.Close()
	adopted, why := next.AdoptRules(h)
	require.True(t, adopted, why)
	require.Equal(t, rules, next.FlowSpec().Rules())
	require.Equal(t, "destination ::1:0:0/96-64 then discard", next.FlowSpec().Rules()[1].Text, "the canonical text handed over")
	q, err := next.loadFresh()
	require.NoError(t, err)
	defer q.Close()
	require.Equal(t, 0, passed(t, q, udp, 4), "the successor's first frames")
	require.Equal(t, 0, passed(t, q, v6, 1))
	c, err := q.FlowCounters()
	require.NoError(t, err)
	require.Equal(t, uint64(4), c["a"].DroppedPackets)

	// A Set through the successor reaches the predecessor's program: one set of maps.
	require.NoError(t, next.FlowSpec().Set(rules[1:]))
	require.Equal(t, 3, passed(t, p, udp, 3))
	require.Equal(t, 0, passed(t, p, v6, 1))
	c, err = p.FlowCounters()
	require.NoError(t, err)
	require.Equal(t, FlowCount{Packets: 3, Bytes: 3 * uint64(len(v6)), DroppedPackets: 3, DroppedBytes: 3 * uint64(len(v6))}, c["b"])
}
