//go:build linux

package bpf_test

import (
	"math/rand/v2"
	"net/netip"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// The limit side of the rule reference: fuzzed programs run on the test
// clock, which stays put, so a budget is burst frames and no more. A budget
// is per rule, or per rule and source masked to the rule's prefix. The
// program's sketch could limit a source early when all 4 of its cells are
// shared with spent budgets of other sources: with the few thousand
// sources a fuzz run makes among 131,072 cells per row, about once in 10^10.

// randomLimit is a budget of 1 to 3 frames, per rule or per source grouped
// to a random prefix.
func randomLimit(rng *rand.Rand) *bpf.Limit {
	return &bpf.Limit{
		Rate: 1 + uint64(rng.IntN(1000)), Burst: 1 + uint64(rng.IntN(3)), PerRule: rng.IntN(3) == 0,
		PrefixV4: uint8(rng.IntN(33)), PrefixV6: uint8(rng.IntN(129)),
	}
}

type refBudgetKey struct {
	rule int
	src  netip.Prefix // invalid for a per-rule budget
}

// refBudgets counts the frames each budget has passed.
type refBudgets map[refBudgetKey]uint64

// take decides a frame of the limit rule rule with source src: within its
// budget it takes one frame of it, over it is limited.
func (b refBudgets) take(p bpf.Policy, rule int, src netip.Addr) (limited bool) {
	l := p.Rules[rule].Limit
	k := refBudgetKey{rule: rule}
	if !l.PerRule {
		bits := int(l.PrefixV6)
		if src.Is4() {
			bits = int(l.PrefixV4)
		}
		k.src, _ = src.Prefix(bits)
	}
	if b[k] >= l.Burst {
		return true
	}
	b[k]++
	return false
}

// refLimit applies the budget of the rule that decided first, when it is a
// limit rule, to the reference's decision: drop and verdict as for a drop
// rule when the frame is over budget.
func (rp *ruleProgram) refLimit(first []byte, rule int, drop *bool, verdict *uint32) (limited bool) {
	if rule < 0 || rp.policy.Rules[rule].Limit == nil {
		return false
	}
	f, _ := refRuleFrame(first)
	if !rp.budgets.take(rp.policy, rule, f.src) {
		return false
	}
	*drop = true
	if !rp.policy.DryRun {
		*verdict = xdpDrop
	}
	return true
}
