package bpf

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPortMasks: every port's mask holds exactly the rules one of whose
// ranges contains it (or that have no ranges), with ranges that repeat,
// overlap, nest, touch and reach both ends of the port space.
func TestPortMasks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rules := []Rule{
		{SrcPorts: []PortRange{{53, 53}, {53, 53}, {0, 0}, {65535, 65535}}},
		{SrcPorts: []PortRange{{1000, 1999}, {1500, 2500}, {1200, 1300}, {2501, 2600}, {2602, 2602}}},
		{SrcPorts: []PortRange{{0, 65535}, {80, 80}}},
		{}, // no ports: every port
		{SrcPorts: []PortRange{{60000, 65535}, {40000, 60001}, {10, 20}}},
	}
	for range 20 {
		var rs []PortRange
		for range 1 + rng.IntN(30) {
			lo := uint16(rng.IntN(65536))
			hi := lo + uint16(rng.IntN(int(65535-lo)+1)/(1+rng.IntN(1000)))
			rs = append(rs, PortRange{lo, hi})
		}
		rules = append(rules, Rule{SrcPorts: rs})
	}
	masks := portMasks(rules, func(r *Rule) []PortRange { return r.SrcPorts })
	require.Len(t, masks, 1<<16)
	for p := range 1 << 16 {
		var want uint64
		for i, r := range rules {
			hit := len(r.SrcPorts) == 0
			for _, pr := range r.SrcPorts {
				hit = hit || pr.Contains(uint16(p))
			}
			if hit {
				want |= 1 << i
			}
		}
		if masks[p] != want {
			t.Fatalf("port %d: mask %#x, want %#x", p, masks[p], want)
		}
	}
}
