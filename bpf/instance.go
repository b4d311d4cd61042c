//go:build linux

package bpf

import (
	"errors"
	"sync"

	"github.com/cilium/ebpf"
)

// Instance is the kernel side of one plugin instance: its policy, compiled
// once, and the maps of its rules, loaded and filled once and shared by the
// programs of all its interfaces. Each program has counters of its own.
// Acquire gets an interface its program; Close lets the shared maps go
// (the programs still attached keep what they use).
type Instance struct {
	policy      Policy
	fingerprint string
	mu          sync.Mutex  // programs may be loaded on the instance at once (SwapRules)
	rules       *ruleTables // compiled on first use
	ruleMaps    *ruleMaps   // loaded on first use; nil without rules
	limits      *ebpf.Map   // limiter cells the rule maps are to take over (ContinueLimits)
	bans        *BanTable   // loaded on first use (Bans); nil without bans
}

// NewInstance returns the instance of policy. It touches no kernel state:
// the rules are compiled, and their maps loaded, by the first program.
func NewInstance(policy Policy) *Instance {
	policy = withFlowSpec(policy)
	return &Instance{policy: policy, fingerprint: policy.fingerprint()}
}

// Close closes the instance's descriptors of the shared rule maps.
func (in *Instance) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.limits != nil {
		in.limits.Close()
		in.limits = nil
	}
	var banErr error
	if in.bans != nil {
		banErr = in.bans.release()
		in.bans = nil
	}
	if in.ruleMaps == nil {
		return banErr
	}
	err := in.ruleMaps.Close()
	in.ruleMaps = nil
	return errors.Join(err, banErr)
}

// compiled returns the policy's rules compiled for the program.
func (in *Instance) compiled() (*ruleTables, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.compiledLocked()
}

func (in *Instance) compiledLocked() (*ruleTables, error) {
	if in.rules != nil {
		return in.rules, nil
	}
	rules, err := compileRules(in.policy.Rules)
	if err != nil {
		return nil, err
	}
	in.rules = rules
	return rules, nil
}

// shared returns the rule maps the programs of the instance share, loading
// and filling them the first time; nil without rules.
func (in *Instance) shared() (*ruleMaps, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	rules, err := in.compiledLocked()
	if err != nil || rules.count == 0 {
		return nil, err
	}
	if in.ruleMaps != nil {
		return in.ruleMaps, nil
	}
	spec, err := in.specOf(rules)
	if err != nil {
		return nil, err
	}
	m, err := loadRuleMaps(spec, rules, in.limits)
	if in.limits != nil {
		// The rule maps hold their own reference.
		in.limits.Close()
		in.limits = nil
	}
	if err != nil {
		return nil, err
	}
	in.ruleMaps = m
	return m, nil
}

// Load loads a program for policy with rule maps of its own, attached to
// nothing. The caller must Close it. Acquire is the way to get an
// interface its program; Load serves tests and benchmarks that run the
// program without an interface.
func Load(policy Policy) (*Program, error) {
	in := NewInstance(policy)
	spec, err := in.spec()
	if err != nil {
		return nil, err
	}
	p, err := in.load(spec, nil)
	if err != nil {
		return nil, errors.Join(err, in.Close())
	}
	p.private = true
	return p, nil
}
