//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
)

// SwapRules puts the rules of policy in force on the attached program with
// no gap: a copy of the program with its rule maps filled from policy, on
// p's counters, replaces p's program on its link. The kernel swaps a link's
// program atomically, and a program holds its own rule maps, so every frame
// is decided wholly by the old rules or wholly by the new ones, never by a
// half-written set; the counters continue. policy may differ from p's only
// in the rules' prefixes (prefix files change): the same rules in the same
// order with the same actions, so that every counter keeps its meaning. On
// error p is as it was, its rules in force.
func (p *Program) SwapRules(policy Policy) error {
	if p.link == nil {
		return errors.New("swap rules: not attached")
	}
	if err := sameCounting(p.policy, policy); err != nil {
		return fmt.Errorf("swap rules: %w", err)
	}
	spec, rules, err := configuredSpec(policy)
	if err != nil {
		return err
	}
	counters := map[string]*ebpf.Map{xdpDropMapCounters: p.objs.Counters}
	if p.objs.RuleCounters != nil {
		counters[xdpDropMapRuleCounters] = p.objs.RuleCounters
	}
	objs, err := loadVariant(spec, p.multiBuffer, &ebpf.CollectionOptions{MapReplacements: counters})
	if err != nil {
		return err
	}
	if err := objs.fillRules(rules); err != nil {
		objs.Close()
		return err
	}
	objs.dropUnused(rules.count, rules.dims)
	id, err := programID(objs.Prog)
	if err != nil {
		objs.Close()
		return err
	}
	if err := p.link.Update(objs.Prog); err != nil {
		objs.Close()
		return fmt.Errorf("swap rules: replace the program on its link: %w", err)
	}
	// The new objects hold clones of p's counters: p keeps its own (pinned,
	// handed over by descriptor), and the old program goes with its rule maps.
	objs.Counters.Close()
	if objs.RuleCounters != nil {
		objs.RuleCounters.Close()
	}
	old := p.objs
	objs.Counters, objs.RuleCounters = old.Counters, old.RuleCounters
	old.Counters, old.RuleCounters = nil, nil
	p.objs = objs
	old.Close()
	p.policy, p.rules, p.id = policy, rules, id
	p.fingerprint = policy.fingerprint()
	return nil
}

// sameCounting reports how next counts differently from cur, beyond the
// rules' prefixes: a swap may change only what the counters do not name.
func sameCounting(cur, next Policy) error {
	if cur.DropAll != next.DropAll || !slices.Equal(cur.Protocols, next.Protocols) || cur.DryRun != next.DryRun || cur.PerQueue != next.PerQueue {
		return errors.New("the drop policy differs")
	}
	if len(cur.Rules) != len(next.Rules) {
		return fmt.Errorf("%d rules instead of %d", len(next.Rules), len(cur.Rules))
	}
	for i := range cur.Rules {
		a, b := &cur.Rules[i], &next.Rules[i]
		if a.Name != b.Name || a.Drop != b.Drop || !slices.Equal(a.Protocols, b.Protocols) ||
			!slices.Equal(a.SrcPorts, b.SrcPorts) || !slices.Equal(a.DstPorts, b.DstPorts) || !slices.Equal(a.PrefixFiles, b.PrefixFiles) {
			return fmt.Errorf("rule %d (%q) differs in more than its prefixes", i+1, a.Name)
		}
	}
	return nil
}
