//go:build linux

package bpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// programMaps returns the maps the loaded program uses, by name, opened by
// id (the test runs as root); the caller closes them.
func programMaps(t *testing.T, p *Program) map[string]*ebpf.Map {
	t.Helper()
	info, err := p.XDP().Info()
	require.NoError(t, err)
	ids, ok := info.MapIDs()
	require.True(t, ok)
	maps := map[string]*ebpf.Map{}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		require.NoError(t, err)
		mi, err := m.Info()
		require.NoError(t, err)
		maps[mi.Name] = m
	}
	return maps
}

func closeMaps(maps map[string]*ebpf.Map) {
	for _, m := range maps {
		m.Close()
	}
}

// TestNoRulesCountersOnly: a program without rules counts in the counters
// map alone, one class-sized block per CPU and slot, under each class's own
// action. The program does not use rule_counters, this process holds no
// descriptor of it, and no read looks it up.
func TestNoRulesCountersOnly(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, perQueue := range []bool{false, true} {
		policy := Policy{Protocols: []uint8{frames.ProtoUDP}, PerQueue: perQueue}
		p, err := Load(policy)
		require.NoError(t, err)
		defer p.Close()
		require.Nil(t, p.objs.RuleCounters, "per_queue %v: no rule_counters descriptor", perQueue)
		require.Nil(t, p.perCPURules, "per_queue %v: nothing to read rule counters into", perQueue)

		maps := programMaps(t, p)
		defer closeMaps(maps)
		require.NotContains(t, maps, xdpDropMapRuleCounters, "the program without rules is compiled without them")
		require.Equal(t, policy.queueSlots(), maps[xdpDropMapCounters].MaxEntries())
		require.Equal(t, uint32(unsafe.Sizeof(xdpDropCounterBlock{})), maps[xdpDropMapCounters].ValueSize())
		require.Equal(t, ClassCount*16, int(maps[xdpDropMapCounters].ValueSize()), "the block of the program before rules")

		udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
		tcp := frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoTCP, frames.TCP(0)))
		for _, f := range []struct {
			frame  []byte
			repeat uint32
		}{{udp, 3}, {tcp, 5}} {
			require.NoError(t, runEach(p.XDP(), &ebpf.RunOptions{Data: f.frame}, f.repeat))
		}
		var want Block
		want.Class[IPv4Class(frames.ProtoUDP)][ActionDrop] = Counter{3, 3 * uint64(len(udp))}
		want.Class[IPv6Class(frames.ProtoTCP)][ActionPass] = Counter{5, 5 * uint64(len(tcp))}
		requireReads(t, p, &want)
	}
}

// TestCountersSplit: with rules, a frame a rule gave its class's own action
// is counted in the counters map, one it gave the other action in
// rule_counters' other[], and every ruled frame under its rule; the read
// puts each back under Class[class][action] exactly.
func TestCountersSplit(t *testing.T) {
	testns.RequirePrivileged(t)
	const tcp, udp, icmp = frames.ProtoTCP, frames.ProtoUDP, frames.ProtoICMP
	rules := []Rule{
		{Name: "tcp", Drop: true, Protocols: []uint8{tcp}},                                    // other action
		{Name: "dns", Protocols: []uint8{udp}, DstPorts: []PortRange{{53, 53}}},               // other action
		{Name: "discard", Drop: true, Protocols: []uint8{udp}, DstPorts: []PortRange{{9, 9}}}, // own action
	}
	udpTo := func(port uint16) []byte {
		return frames.Ether(frames.EtherIPv4, frames.IPv4(udp, 0, frames.Ports(frames.UDP(8), 1000, port)))
	}
	runs := []struct {
		frame  []byte
		class  Class
		action Action
		rule   int // -1: none
		repeat uint32
	}{
		{frames.Ether(frames.EtherIPv4, frames.IPv4(tcp, 0, frames.TCP(6))), IPv4Class(tcp), ActionDrop, 0, 3},
		{udpTo(53), IPv4Class(udp), ActionPass, 1, 5},
		{udpTo(9), IPv4Class(udp), ActionDrop, 2, 7},
		{udpTo(80), IPv4Class(udp), ActionDrop, -1, 11},
		{frames.Ether(frames.EtherIPv4, frames.IPv4(icmp, 0, frames.ICMPEcho(false, 8))), IPv4Class(icmp), ActionPass, -1, 13},
	}
	for _, perQueue := range []bool{false, true} {
		policy := Policy{Protocols: []uint8{udp}, Rules: rules, PerQueue: perQueue}
		p, err := Load(policy)
		require.NoError(t, err)
		defer p.Close()

		var want Block
		var class xdpDropCounterBlock
		var rule xdpDropRuleBlock
		for _, r := range runs {
			require.NoError(t, runEach(p.XDP(), &ebpf.RunOptions{Data: r.frame}, r.repeat))
			n := Counter{uint64(r.repeat), uint64(r.repeat) * uint64(len(r.frame))}
			add := func(c *xdpDropCounter) { c.Packets += n.Packets; c.Bytes += n.Bytes }
			want.Class[r.class][r.action].Packets += n.Packets
			want.Class[r.class][r.action].Bytes += n.Bytes
			if policy.Drops(r.class) == (r.action == ActionDrop) {
				add(&class.Class[r.class])
			} else {
				add(&rule.Other[r.class])
			}
			if r.rule >= 0 {
				want.Rule[r.rule].Packets += n.Packets
				want.Rule[r.rule].Bytes += n.Bytes
				add(&rule.Rule[r.rule])
			}
		}

		// The kernel's maps, as the program wrote them.
		maps := programMaps(t, p)
		defer closeMaps(maps)
		require.Equal(t, policy.queueSlots(), maps[xdpDropMapRuleCounters].MaxEntries())
		var classes []xdpDropCounterBlock
		require.NoError(t, maps[xdpDropMapCounters].Lookup(uint32(0), &classes))
		var rules []xdpDropRuleBlock
		require.NoError(t, maps[xdpDropMapRuleCounters].Lookup(uint32(0), &rules))
		var gotClass xdpDropCounterBlock
		var gotRule xdpDropRuleBlock
		for cpu := range classes {
			for c := range gotClass.Class {
				gotClass.Class[c].Packets += classes[cpu].Class[c].Packets
				gotClass.Class[c].Bytes += classes[cpu].Class[c].Bytes
				gotRule.Other[c].Packets += rules[cpu].Other[c].Packets
				gotRule.Other[c].Bytes += rules[cpu].Other[c].Bytes
			}
			for r := range gotRule.Rule {
				gotRule.Rule[r].Packets += rules[cpu].Rule[r].Packets
				gotRule.Rule[r].Bytes += rules[cpu].Rule[r].Bytes
			}
		}
		require.Equal(t, class, gotClass, "per_queue %v: the counters map", perQueue)
		require.Equal(t, rule, gotRule, "per_queue %v: rule_counters", perQueue)

		requireReads(t, p, &want)
	}
}

// requireReads checks that every read of p, summed over what it passes on,
// gives want.
func requireReads(t *testing.T, p *Program, want *Block) {
	t.Helper()
	var scratch Block
	reads := map[string]func(BlockFunc) error{
		"sum":           func(f BlockFunc) error { return p.ReadSum(&scratch, f) },
		"per queue":     func(f BlockFunc) error { return p.ReadPerQueue(&scratch, f) },
		"per CPU":       p.ReadPerCPU,
		"per queue+CPU": func(f BlockFunc) error { return p.ReadPerQueueCPU(&scratch, f) },
	}
	for name, read := range reads {
		var got Block
		require.NoError(t, read(func(_, _ int, b *Block) {
			for c := range got.Class {
				for a := range got.Class[c] {
					got.Class[c][a].Packets += b.Class[c][a].Packets
					got.Class[c][a].Bytes += b.Class[c][a].Bytes
				}
			}
			for r := range got.Rule {
				got.Rule[r].Packets += b.Rule[r].Packets
				got.Rule[r].Bytes += b.Rule[r].Bytes
			}
		}))
		require.Equal(t, want.Class, got.Class, "%s: class counters", name)
		require.Equal(t, want.Rule, got.Rule, "%s: rule counters", name)
	}
}

// runEach runs prog n times, one run per call: a run with Repeat > 1 that a
// signal interrupts has counted the runs it made, and cilium/ebpf then
// starts all n again, so exact counts need single runs.
func runEach(prog *ebpf.Program, opts *ebpf.RunOptions, n uint32) error {
	for range n {
		o := *opts
		o.Repeat = 1
		if _, err := prog.Run(&o); err != nil {
			return err
		}
	}
	return nil
}
