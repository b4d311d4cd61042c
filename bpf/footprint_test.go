//go:build linux

package bpf_test

import (
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestFootprintOfLoadedMaps: the footprint a config check prints, from the
// rules compiled without loading, names the exact-prefix table the load
// creates, and bounds the kernel memory the loaded rule maps take, as the
// kernel accounts it, within a factor of the bound (an estimate, not a
// constant).
func TestFootprintOfLoadedMaps(t *testing.T) {
	testns.RequirePrivileged(t)
	const seed = 11
	defer bpf.FixHashKey(seed)()
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 3))
	list := benignPrefixes(rng, 3000, 2000)
	limit := &bpf.Limit{Rate: 100, Burst: 100, PrefixV4: 32, PrefixV6: 64}
	for _, c := range []struct {
		name  string
		rules []bpf.Rule
	}{
		{"prefixes", []bpf.Rule{{Name: "list", Drop: true, SrcPrefixes: list}}},
		{"ports", []bpf.Rule{{Name: "dns", Protocols: []uint8{17}, DstPorts: []bpf.PortRange{{Lo: 53, Hi: 53}}}}},
		{"limit", []bpf.Rule{{Name: "list", Drop: true, DstPrefixes: list[:100]}, {Name: "lim", Protocols: []uint8{17}, Limit: limit}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			policy := bpf.Policy{Rules: c.rules}
			fp, err := bpf.FootprintOf(policy)
			if err != nil {
				t.Fatal(err)
			}
			p, err := bpf.Load(policy)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if len(c.rules[0].SrcPrefixes)+len(c.rules[0].DstPrefixes) > 0 {
				if slots, _ := exactTableSize(t, p); int(slots) != fp.ExactSlots {
					t.Errorf("prefix_exact has %d slots loaded, the footprint says %d", slots, fp.ExactSlots)
				}
			}
			mem, err := p.RuleMemory()
			if err != nil {
				t.Fatal(err)
			}
			bound := fp.RuleMaps + uint64(cpus)*fp.PerCPU
			t.Logf("rule maps: %d bytes loaded, footprint %d (+ %d per CPU)", mem, fp.RuleMaps, fp.PerCPU)
			if mem > bound {
				t.Fatalf("the loaded rule maps take %d bytes, more than the footprint's %d", mem, bound)
			}
			if 3*mem < bound {
				t.Fatalf("the footprint, %d bytes, is more than 3 times what the loaded rule maps take, %d", bound, mem)
			}
		})
	}
}
