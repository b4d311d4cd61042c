//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// Rules is a policy compiled for the program once, to be swapped into the
// programs of several interfaces (SwapRules) without compiling it for each;
// the first swap fills rule maps that the programs swapped after it share.
// The caller must Close it once the swaps are done: the programs hold
// their own references to the maps.
type Rules struct {
	policy Policy
	spec   *ebpf.CollectionSpec
	tables *ruleTables
	mu     sync.Mutex           // SwapRules may run for several programs at once
	maps   map[string]*ebpf.Map // filled rule maps, after the first swap
}

// CompileRules compiles policy's rules for SwapRules.
func CompileRules(policy Policy) (*Rules, error) {
	spec, tables, err := configuredSpec(policy)
	if err != nil {
		return nil, err
	}
	return &Rules{policy: policy, spec: spec, tables: tables}, nil
}

// Close releases the rule maps the swaps shared.
func (r *Rules) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closeMaps()
}

func (r *Rules) closeMaps() error {
	var err error
	for _, m := range r.maps {
		err = errors.Join(err, m.Close())
	}
	r.maps = nil
	return err
}

// SwapRules puts the compiled rules in force on the attached program with
// no gap: a copy of the program with its rule maps filled from them, on
// p's counters, replaces p's program on its link. The kernel swaps a link's
// program atomically, and a program holds its own rule maps, so every frame
// is decided wholly by the old rules or wholly by the new ones, never by a
// half-written set; the counters continue. The policy may differ from p's
// only in the rules' prefixes (prefix files change): the same rules in the
// same order with the same actions, so that every counter keeps its
// meaning. On error p is as it was, its rules in force.
func (p *Program) SwapRules(r *Rules) error {
	if p.link == nil {
		return errors.New("swap rules: not attached")
	}
	if err := sameCounting(p.policy, r.policy); err != nil {
		return fmt.Errorf("swap rules: %w", err)
	}
	// A copy of the spec each: the loads of several programs may run at once.
	policy, spec, rules := r.policy, r.spec.Copy(), r.tables
	shared := map[string]*ebpf.Map{xdpDropMapCounters: p.objs.Counters}
	if p.objs.RuleCounters != nil {
		shared[xdpDropMapRuleCounters] = p.objs.RuleCounters
	}
	r.mu.Lock()
	filled := r.maps != nil
	maps.Copy(shared, r.maps) // set once, closed only by Close
	r.mu.Unlock()
	maps.Copy(shared, p.objs.sampleMaps()) // this interface's ring goes on

	objs, err := loadVariant(spec, p.multiBuffer, &ebpf.CollectionOptions{MapReplacements: shared})
	if err != nil {
		return err
	}
	if !filled {
		if err := objs.fillRules(rules); err != nil {
			objs.Close()
			return err
		}
	}
	objs.dropUnused(rules.count, rules.dims, policy.Sample.On())
	id, err := programID(objs.Prog)
	if err != nil {
		objs.Close()
		return err
	}
	if err := p.link.Update(objs.Prog); err != nil {
		objs.Close()
		return fmt.Errorf("swap rules: replace the program on its link: %w", err)
	}
	r.mu.Lock()
	if r.maps == nil {
		r.shareMaps(&objs)
	}
	r.mu.Unlock()
	// The new objects hold clones of p's counters: p keeps its own (pinned,
	// handed over by descriptor), and the old program goes with its rule maps.
	objs.Counters.Close()
	if objs.RuleCounters != nil {
		objs.RuleCounters.Close()
	}
	old := p.objs
	objs.Counters, objs.RuleCounters = old.Counters, old.RuleCounters
	old.Counters, old.RuleCounters = nil, nil
	objs.keepSampleMaps(&old)
	p.objs = objs
	old.Close()
	p.policy, p.rules, p.id = policy, rules, id
	p.fingerprint = policy.fingerprint()
	return nil
}

// shareMaps keeps references to the rule maps objs were filled with, for
// the programs swapped after it; one that cannot be kept leaves each to
// fill its own.
func (r *Rules) shareMaps(objs *objects) {
	all := objs.maps()
	delete(all, xdpDropMapCounters)
	delete(all, xdpDropMapRuleCounters)
	for name := range objs.sampleMaps() {
		delete(all, name) // each interface's own
	}
	r.maps = make(map[string]*ebpf.Map, len(all))
	for name, m := range all {
		c, err := m.Clone()
		if err != nil {
			r.closeMaps()
			return
		}
		r.maps[name] = c
	}
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
