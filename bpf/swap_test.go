//go:build linux

package bpf_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// swapPolicy is a blocklist rule fed from a file, holding list.
func swapPolicy(list ...string) bpf.Policy {
	return bpf.Policy{Rules: []bpf.Rule{
		{Name: "mgmt", Protocols: []uint8{frames.ProtoTCP}, DstPorts: ports(port(22))},
		{Name: "blocklist", Drop: true, SrcPrefixes: prefixes(list...), PrefixFiles: []string{"src /lists/drop.txt"}},
	}}
}

// TestSwapRules swaps the prefixes of an attached program: the interface
// runs the new program, frames get the new set's verdicts, and the class
// and rule counters go on from where they were.
func TestSwapRules(t *testing.T) {
	testns.RequirePrivileged(t)
	ns := testns.New(t)
	old := swapPolicy("198.51.100.0/24", "2001:db8:1::/48")
	p, err := bpf.Load(old)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeGeneric) }))
	oldID := p.ID()
	fp := p.Fingerprint()

	listedOld := ruleFrame{src: "198.51.100.7", dst: "192.0.2.1", proto: frames.ProtoUDP, sport: 1, dport: 2}
	listedNew := ruleFrame{src: "203.0.113.9", dst: "192.0.2.1", proto: frames.ProtoUDP, sport: 1, dport: 2}
	listedNew6 := ruleFrame{src: "2001:db8:2::9", dst: "2001:db8::1", proto: frames.ProtoUDP, sport: 1, dport: 2}
	runRuleCases(t, p, old, []ruleCase{
		rc("old list drops", listedOld, "blocklist", true),
		rc("new list not yet", listedNew, "", false),
	})
	var before bpf.Block
	require.NoError(t, p.ReadBlock(&before))

	next := swapPolicy("203.0.113.0/24", "2001:db8:2::/48", "2001:db8:3::/48")
	require.NoError(t, p.SwapRules(compile(t, next)))
	require.NotEqual(t, oldID, p.ID(), "a new program")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(p.ID()), id, "the interface runs the new program")
	require.Equal(t, fp, p.Fingerprint(), "the counters keep their fingerprint")

	var after bpf.Block
	require.NoError(t, p.ReadBlock(&after))
	require.Equal(t, before, after, "counters continue")
	runRuleCases(t, p, next, []ruleCase{
		rc("old list gone", listedOld, "", false),
		rc("new list drops", listedNew, "blocklist", true),
		rc("new list drops IPv6", listedNew6, "blocklist", true),
		rc("other rules unchanged", ruleFrame{src: "198.51.100.7", dst: "192.0.2.1", proto: frames.ProtoTCP, sport: 1, dport: 22}, "mgmt", false),
	})
	var total bpf.Block
	require.NoError(t, p.ReadBlock(&total))
	require.Equal(t, uint64(3), total.Rule[1].Packets, "blocklist: one frame before the swap, two after")
}

// TestSwapRulesRefusesOtherCounting refuses a swap that would change what
// the counters mean, and leaves the program as it was.
func TestSwapRulesRefusesOtherCounting(t *testing.T) {
	testns.RequirePrivileged(t)
	ns := testns.New(t)
	p, err := bpf.Load(swapPolicy("198.51.100.0/24"))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeGeneric) }))
	id := p.ID()

	renamed := swapPolicy("203.0.113.0/24")
	renamed.Rules[1].Name = "other"
	require.ErrorContains(t, p.SwapRules(compile(t, renamed)), `rule 2 ("blocklist") differs in more than its prefixes`)
	pass := swapPolicy("203.0.113.0/24")
	pass.Rules[1].Drop = false
	require.Error(t, p.SwapRules(compile(t, pass)))
	require.Equal(t, id, p.ID())

	verdict, err := p.XDP().Run(&ebpf.RunOptions{Data: ruleFrame{src: "198.51.100.7", dst: "192.0.2.1", proto: frames.ProtoUDP, sport: 1, dport: 2}.build()})
	require.NoError(t, err)
	require.Equal(t, uint32(xdpDrop), verdict, "the old set is in force")
}

func compile(t *testing.T, policy bpf.Policy) *bpf.Instance {
	t.Helper()
	r, err := bpf.CompileRules(policy)
	require.NoError(t, err)
	return r
}

// TestSwapRulesShared swaps one compilation into the programs of two
// interfaces: both decide by the new set, from the same rule maps (one
// copy in the kernel), each on its own counters.
func TestSwapRulesShared(t *testing.T) {
	testns.RequirePrivileged(t)
	ns := testns.New(t)
	idx2, _, err := ns.AddVeth("xdps0", "xdps1")
	require.NoError(t, err)
	old := swapPolicy("198.51.100.0/24")
	var progs []*bpf.Program
	for _, dev := range []struct {
		name string
		idx  int
	}{{testns.Dev, ns.DevIdx}, {"xdps0", idx2}} {
		p, err := bpf.Load(old)
		require.NoError(t, err)
		defer p.Close()
		require.NoError(t, ns.Attach(dev.name, func() error { return p.Attach(dev.idx, bpf.ModeGeneric) }))
		progs = append(progs, p)
	}
	next := swapPolicy("203.0.113.0/24", "2001:db8:2::/48")
	r := compile(t, next)
	for _, p := range progs {
		require.NoError(t, p.SwapRules(r))
	}
	require.NoError(t, r.Close(), "the programs hold the maps")

	mapIDs := func(p *bpf.Program) map[ebpf.MapID]bool {
		info, err := p.XDP().Info()
		require.NoError(t, err)
		ids, ok := info.MapIDs()
		require.True(t, ok)
		out := map[ebpf.MapID]bool{}
		for _, id := range ids {
			out[id] = true
		}
		return out
	}
	a, b := mapIDs(progs[0]), mapIDs(progs[1])
	var shared, own int
	for id := range a {
		if b[id] {
			shared++
		} else {
			own++
		}
	}
	require.GreaterOrEqual(t, shared, 2, "rule maps shared (prefix buckets and exact table at least)")
	require.GreaterOrEqual(t, own, 2, "counters and rule counters each program's own")

	for i, p := range progs {
		var before bpf.Block
		require.NoError(t, p.ReadBlock(&before))
		runRuleCases(t, p, next, []ruleCase{
			rc(fmt.Sprintf("interface %d: old list gone", i), ruleFrame{src: "198.51.100.7", dst: "192.0.2.1", proto: frames.ProtoUDP, sport: 1, dport: 2}, "", false),
			rc(fmt.Sprintf("interface %d: new list drops", i), ruleFrame{src: "203.0.113.9", dst: "192.0.2.1", proto: frames.ProtoUDP, sport: 1, dport: 2}, "blocklist", true),
			rc(fmt.Sprintf("interface %d: new list drops IPv6", i), ruleFrame{src: "2001:db8:2::9", dst: "2001:db8::1", proto: frames.ProtoUDP, sport: 1, dport: 2}, "blocklist", true),
		})
	}
}
