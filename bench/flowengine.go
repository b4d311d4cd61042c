//go:build linux

package main

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// flowEngine is a program with the FlowSpec engine on (nothing else in its
// policy) and a rule set in force.
type flowEngine struct {
	p      *bpf.Program
	memory uint64 // the FlowSpec maps' kernel memory
}

// loadFlowEngine loads the program with FlowSpec on and puts rules in
// force (none: the same program with no rules).
func loadFlowEngine(rules []bpf.FlowRule) (*flowEngine, error) {
	p, err := bpf.Load(bpf.Policy{FlowSpec: bpf.FlowSpecConfig{On: true}})
	if err != nil {
		return nil, err
	}
	t := p.FlowSpec()
	if t == nil {
		p.Close()
		return nil, fmt.Errorf("a program with FlowSpec on has no FlowSpec table")
	}
	if err := t.Set(rules); err != nil {
		p.Close()
		return nil, fmt.Errorf("set %d rules: %w", len(rules), err)
	}
	if got := len(t.Rules()); got != len(rules) {
		p.Close()
		return nil, fmt.Errorf("%d rules set, %d in force", len(rules), got)
	}
	mem, err := t.Memory()
	if err != nil {
		p.Close()
		return nil, err
	}
	return &flowEngine{p: p, memory: mem}, nil
}

func (f *flowEngine) xdp() *ebpf.Program { return f.p.XDP() }

func (f *flowEngine) Close() error { return f.p.Close() }

// checkCounters checks that the rules of want, and no others, matched and
// dropped exactly as many frames as it says (with atLeast, at least as
// many: interrupted runs were repeated).
func (f *flowEngine) checkCounters(want map[string]uint64, atLeast bool) error {
	got, err := f.p.FlowCounters()
	if err != nil {
		return err
	}
	for id, c := range got {
		if c.Gone != nil { // withdrawn since: the set before's
			continue
		}
		w := want[id]
		ok := c.Packets == w && c.DroppedPackets == w
		if atLeast {
			ok = c.Packets >= w && c.DroppedPackets == c.Packets && (w != 0 || c.Packets == 0)
		}
		if !ok {
			return fmt.Errorf("FlowSpec rule %s counted %d frames, %d dropped, want %d", id, c.Packets, c.DroppedPackets, w)
		}
	}
	for id, w := range want {
		if _, ok := got[id]; !ok && w != 0 {
			return fmt.Errorf("FlowSpec rule %s has no counters, want %d frames", id, w)
		}
	}
	return nil
}
