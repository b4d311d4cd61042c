//go:build linux

package bpf

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBanMapMemoryBound: the ban maps' memory -check states before
// loading (BanMapMemory) bounds what the kernel accounts for them once
// loaded, and is within 15% of it.
func TestBanMapMemoryBound(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, max := range []int{1, 0, 200_000} {
		in := NewInstance(Policy{Bans: BansConfig{On: true, Max: max}})
		table, err := in.Bans()
		require.NoError(t, err)
		got, err := table.Memory()
		require.NoError(t, err)
		stated := BanMapMemory(max)
		require.LessOrEqual(t, got, stated, "max %d", max)
		require.Greater(t, float64(got), 0.85*float64(stated), "max %d: stated %d, measured %d", max, stated, got)
		require.NoError(t, in.Close())
	}
}

// TestFlowSpecMemoryBound: the FlowSpec maps' memory -check states before
// loading (FlowSpecMemory, and FootprintOf's FlowSpecMaps and PerCPU)
// bounds what the kernel accounts for them (FlowTable.Memory) at 1,024
// rules a family, each with a destination and a source prefix of its own
// and a canonical text of two handover chunks, set twice with other
// prefixes so that both generations fill the tries. The stated records
// are two chunks for every slot, twice the set in force's: the kernel's
// figure is within 30 % of the bound, not closer.
func TestFlowSpecMemoryBound(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := Policy{FlowSpec: FlowSpecConfig{On: true}}
	in := NewInstance(policy)
	defer in.Close()
	table := in.FlowSpec()
	empty, err := table.Memory()
	require.NoError(t, err)
	for round := range 2 {
		var rules []FlowRule
		for i := range FlowMaxRules {
			a4 := netip.AddrFrom4([4]byte{10, byte(round), byte(i >> 8), byte(i)})
			a6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(round), 14: byte(i >> 8), 15: byte(i)})
			text := strings.Repeat("x", 1100) // two chunks of the handover records a rule
			rules = append(rules,
				FlowRule{ID: fmt.Sprintf("v4-%d", i), Text: text, Dst: &FlowPrefix{Prefix: netip.PrefixFrom(a4, 32)}, Src: &FlowPrefix{Prefix: netip.PrefixFrom(a4, 24+i%8)},
					Proto: FlowComponent{{Op: FlowEQ, Value: 17}}, DstPort: FlowComponent{{Op: FlowEQ, Value: uint64(i)}}, Action: FlowDrop},
				FlowRule{ID: fmt.Sprintf("v6-%d", i), IPv6: true, Text: text, Dst: &FlowPrefix{Prefix: netip.PrefixFrom(a6, 128)}, Src: &FlowPrefix{Prefix: netip.PrefixFrom(a6, 120+i%8)},
					Proto: FlowComponent{{Op: FlowEQ, Value: 17}}, DstPort: FlowComponent{{Op: FlowEQ, Value: uint64(i)}}, Action: FlowDrop})
		}
		require.NoError(t, table.Set(rules))
	}
	got, err := table.Memory()
	require.NoError(t, err)
	cpus, err := ebpf.PossibleCPU()
	require.NoError(t, err)
	shared, _ := FlowSpecMemory(0)
	// Memory counts the scratch, per CPU, besides the shared maps.
	stated := shared + uint64(cpus)*uint64(unsafe.Sizeof(xdpDropFsScratch{}))
	t.Logf("FlowSpec maps: %d bytes empty, %d at 2 x %d rules, stated at most %d", empty, got, FlowMaxRules, stated)
	require.LessOrEqual(t, got, stated)
	require.Greater(t, float64(got), 0.7*float64(stated), "stated %d, measured %d", stated, got)

	fp, err := FootprintOf(policy)
	require.NoError(t, err)
	_, perCPU := FlowSpecMemory(0)
	require.Equal(t, shared, fp.FlowSpecMaps)
	require.Equal(t, uint64(policy.queueSlots())*uint64(unsafe.Sizeof(xdpDropCounterBlock{}))+perCPU, fp.PerCPU)
	fp, err = FootprintOf(Policy{})
	require.NoError(t, err)
	require.Zero(t, fp.FlowSpecMaps)
}
