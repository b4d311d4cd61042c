//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// CompileRules returns the instance of policy with its rules compiled
// ahead, to be swapped into the programs of several interfaces (SwapRules)
// without compiling them for each: the first swap loads and fills the
// instance's rule maps, and the programs swapped after it share them, as
// the instance's programs do. It serves Acquire too. The caller must Close
// it once no program is to be loaded on it any more: the programs hold
// their own references to the maps.
func CompileRules(policy Policy) (*Instance, error) {
	in := NewInstance(policy)
	if _, err := in.compiled(); err != nil {
		return nil, err
	}
	return in, nil
}

// SwapRules puts the compiled rules in force on the attached program with
// no gap: a program of r, on p's counters and r's rule maps, replaces p's
// program on its link, and p is r's from then on. The kernel swaps a link's
// program atomically, and a program holds its own rule maps, so every frame
// is decided wholly by the old rules or wholly by the new ones, never by a
// half-written set; the counters continue. The policy may differ from p's
// only in the rules' prefixes (prefix files change): the same rules in the
// same order with the same actions, so that every counter keeps its
// meaning. Several programs may swap into r at once. On error p is as it
// was, its rules in force.
func (p *Program) SwapRules(r *Instance) error {
	if p.link == nil {
		return errors.New("swap rules: not attached")
	}
	if err := sameCounting(p.in.policy, r.policy); err != nil {
		return fmt.Errorf("swap rules: %w", err)
	}
	spec, err := r.spec()
	if err != nil {
		return err
	}
	// The budgets go on, as the counters do: r's rule maps get p's limiter.
	r.ContinueLimits(p.in)
	// And the bans in force: r's programs run on p's ban maps.
	r.ContinueBans(p.in)
	shared, err := r.shared()
	if err != nil {
		return err
	}
	replace := shared.byName()
	maps.Copy(replace, p.objs.maps())
	maps.Copy(replace, p.samples.byName()) // this interface's ring goes on
	if err := p.addBanMaps(r, spec, replace); err != nil {
		return err
	}
	objs, err := loadVariant(spec, p.multiBuffer, replace)
	if err != nil {
		return err
	}
	// Clones of p's counters, or unused ones: p keeps its own (pinned,
	// handed over by descriptor).
	objs.Counters.Close()
	objs.RuleCounters.Close()
	id, err := programID(objs.Prog)
	if err != nil {
		objs.Prog.Close()
		return err
	}
	if err := p.link.Update(objs.Prog); err != nil {
		objs.Prog.Close()
		return fmt.Errorf("swap rules: replace the program on its link: %w", err)
	}
	// The old program goes, and with it its rule maps, once no program of
	// its instance uses them.
	p.objs.Prog.Close()
	p.objs.Prog, p.id = objs.Prog, id
	if p.private {
		p.in.Close()
		p.private = false
	}
	p.in = r
	return nil
}

// sameCounting reports how next counts differently from cur, beyond the
// rules' prefixes: a swap may change only what the counters do not name.
func sameCounting(cur, next Policy) error {
	if cur.DropAll != next.DropAll || !slices.Equal(cur.Protocols, next.Protocols) || cur.DryRun != next.DryRun || cur.PerQueue != next.PerQueue || cur.Bans != next.Bans {
		return errors.New("the drop policy differs")
	}
	if len(cur.Rules) != len(next.Rules) {
		return fmt.Errorf("%d rules instead of %d", len(next.Rules), len(cur.Rules))
	}
	for i := range cur.Rules {
		a, b := &cur.Rules[i], &next.Rules[i]
		if a.Name != b.Name || a.Drop != b.Drop || !slices.Equal(a.Protocols, b.Protocols) ||
			!slices.Equal(a.SrcPorts, b.SrcPorts) || !slices.Equal(a.DstPorts, b.DstPorts) || !slices.Equal(a.PrefixFiles, b.PrefixFiles) ||
			(a.Limit == nil) != (b.Limit == nil) || a.Limit != nil && *a.Limit != *b.Limit {
			return fmt.Errorf("rule %d (%s) differs in more than its prefixes", i+1, quote.Value(a.Name))
		}
	}
	return nil
}
