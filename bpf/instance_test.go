//go:build linux

package bpf

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// ruleMapNames are the kernel names of the maps an instance's programs share.
var ruleMapNames = []string{"prefix_buckets", "prefix_exact", "prefix_v4", "prefix_v6", "ports_map"}

// TestInstanceSharesRuleMaps: the programs of one instance, the
// multi-buffer variant among them, use the same rule maps and counters of
// their own; each decides by the rules and counts what it saw alone. A
// program loaded apart has rule maps of its own.
func TestInstanceSharesRuleMaps(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := Policy{Rules: []Rule{
		{Name: "doc", Drop: true, SrcPrefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}},
		{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: []PortRange{{53, 53}}},
	}}
	in := NewInstance(policy)
	defer in.Close()
	a, err := in.loadFresh()
	require.NoError(t, err)
	defer a.Close()
	b, err := in.loadFresh()
	require.NoError(t, err)
	defer b.Close()
	if haveMultiBuffer() == nil {
		require.NoError(t, b.UseMultiBuffer())
	}
	apart, err := Load(policy)
	require.NoError(t, err)
	defer apart.Close()

	ma, mb, mo := programMaps(t, a), programMaps(t, b), programMaps(t, apart)
	defer closeMaps(ma)
	defer closeMaps(mb)
	defer closeMaps(mo)
	for _, name := range ruleMapNames {
		require.Contains(t, ma, name)
		require.Equal(t, mapID(t, ma[name]), mapID(t, mb[name]), "%s is shared", name)
		require.NotEqual(t, mapID(t, ma[name]), mapID(t, mo[name]), "%s of a program loaded apart is its own", name)
	}
	for _, name := range []string{"counters", "rule_counters"} {
		require.NotEqual(t, mapID(t, ma[name]), mapID(t, mb[name]), "%s are each program's own", name)
	}

	doc := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoTCP, 0, frames.TCP(0)),
		netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("198.51.100.1")))
	dns := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(8), 1024, 53)),
		netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("198.51.100.1")))
	require.NoError(t, runEach(a.XDP(), &ebpf.RunOptions{Data: doc}, 3))
	require.NoError(t, runEach(b.XDP(), &ebpf.RunOptions{Data: dns}, 2))
	var ba, bb Block
	require.NoError(t, a.ReadBlock(&ba))
	require.NoError(t, b.ReadBlock(&bb))
	require.Equal(t, [2]uint64{3, 0}, [2]uint64{ba.Rule[0].Packets, ba.Rule[1].Packets}, "a: rule doc decided its 3 frames")
	require.Equal(t, [2]uint64{0, 2}, [2]uint64{bb.Rule[0].Packets, bb.Rule[1].Packets}, "b: rule dns decided its 2 frames")
}

func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	require.NoError(t, err)
	id, ok := info.ID()
	require.True(t, ok)
	return id
}
