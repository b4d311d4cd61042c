//go:build linux

package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// FlowCounters returns the frames each rule in force matched and dropped
// on the program's interface, by FlowRule.ID, summed over CPUs; nil without
// FlowSpec. It returns too, once, each rule withdrawn since the program's
// last read, with its final counts and FlowCount.Gone set (a rule in force
// again under its ID counts afresh, and only that is returned).
func (p *Program) FlowCounters() (map[string]FlowCount, error) {
	if !p.in.policy.FlowSpec.On {
		return nil, nil
	}
	m, err := p.flowCountersMap()
	if err != nil {
		return nil, err
	}
	s, err := p.in.FlowSpec().state()
	if err != nil {
		return nil, err
	}
	// Under the lock: no slot is let go (its counts kept) or reused
	// while it is read.
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]FlowCount, len(s.slots)+len(s.gone[m]))
	for id, c := range s.gone[m] {
		out[id] = c
	}
	var per []xdpDropFsCount
	for id, sl := range s.slots {
		if err := m.Lookup(sl, &per); err != nil {
			return nil, fmt.Errorf("read FlowSpec counters: %w", err)
		}
		out[id] = sumFlowCount(per)
	}
	delete(s.gone, m)
	return out, nil
}

// flowCountersMap is the program's flowspec_counters, found among the
// maps of a program taken over in place the first time.
func (p *Program) flowCountersMap() (*ebpf.Map, error) {
	if p.flowCounters != nil {
		return p.flowCounters, nil
	}
	m, err := p.progMap(xdpDropMapFlowspecCounters)
	if err != nil {
		return nil, err
	}
	p.flowCounters = m
	p.registerFlowCounters()
	return m, nil
}

// kernelObjName is name as the kernel keeps it: at most 15 bytes
// (BPF_OBJ_NAME_LEN with its NUL), so that flowspec_counters reads back
// as flowspec_counte.
func kernelObjName(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

// progMap opens the map of the program named name (as the kernel
// keeps it, kernelObjName).
func (p *Program) progMap(name string) (*ebpf.Map, error) {
	info, err := p.objs.Prog.Info()
	if err != nil {
		return nil, fmt.Errorf("read XDP program info: %w", err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil && mi.Name == kernelObjName(name) {
			return m, nil
		}
		m.Close()
	}
	return nil, fmt.Errorf("the program has no map %s", name)
}

// registerFlowCounters makes the program's counters zeroed with freed slots.
func (p *Program) registerFlowCounters() {
	if p.flowCounters == nil || p.in.bans == nil || p.in.bans.flow == nil {
		return
	}
	s := p.in.bans.flow
	s.mu.Lock()
	s.counters[p.flowCounters] = true
	s.mu.Unlock()
}

// addFlowMaps puts the FlowSpec maps of in and the program's counters
// (made the first time) in replace; nothing without FlowSpec.
func (p *Program) addFlowMaps(in *Instance, spec *ebpf.CollectionSpec, replace map[string]*ebpf.Map) error {
	if !in.policy.FlowSpec.On {
		return nil
	}
	s, err := in.FlowSpec().state()
	if err != nil {
		return err
	}
	for name, m := range s.maps.byName() {
		replace[name] = m
	}
	if p.flowCounters == nil && p.objs.Prog != nil {
		// A program taken over in place: its variants go on with its counters.
		if m, err := p.progMap(xdpDropMapFlowspecCounters); err == nil {
			p.flowCounters = m
		}
	}
	if p.flowCounters == nil {
		m, err := ebpf.NewMap(spec.Maps[xdpDropMapFlowspecCounters])
		if err != nil {
			return fmt.Errorf("create FlowSpec counters: %w", err)
		}
		p.flowCounters = m
	}
	s.mu.Lock()
	s.counters[p.flowCounters] = true
	s.mu.Unlock()
	replace[xdpDropMapFlowspecCounters] = p.flowCounters
	return nil
}

func (p *Program) closeFlowCounters() error {
	if p.flowCounters == nil {
		return nil
	}
	if p.in.bans != nil && p.in.bans.flow != nil {
		s := p.in.bans.flow
		s.mu.Lock()
		delete(s.counters, p.flowCounters)
		delete(s.gone, p.flowCounters)
		s.mu.Unlock()
	}
	err := p.flowCounters.Close()
	p.flowCounters = nil
	return err
}

// release keeps the final counts of the rules let go (gone: their slots)
// for each interface's next FlowCounters read, zeroes their slots in the
// cells and every interface's counters, and frees them.
func (s *flowState) release(gone map[string]uint32, rules map[string]*FlowRule) error {
	if len(gone) == 0 {
		return nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	zeros := make([]xdpDropFsCount, cpus)
	var per []xdpDropFsCount
	for id, sl := range gone {
		if err := s.maps.Cells.Update(sl, xdpDropFsCell{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("zero FlowSpec cell: %w", err)
		}
		for m := range s.counters {
			if err := m.Lookup(sl, &per); err != nil {
				return fmt.Errorf("read FlowSpec counters: %w", err)
			}
			if g := s.gone[m]; len(g) < s.lay.slots() {
				if g == nil {
					g = map[string]FlowCount{}
					s.gone[m] = g
				}
				c := sumFlowCount(per)
				c.Gone = rules[id]
				if c.Gone == nil {
					c.Gone = &FlowRule{ID: id}
				}
				g[id] = c
			}
			if err := m.Update(sl, zeros, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("zero FlowSpec counters: %w", err)
			}
		}
		s.free = append(s.free, sl)
	}
	return nil
}

// sumFlowCount sums a slot's per-CPU counts.
func sumFlowCount(per []xdpDropFsCount) FlowCount {
	var c FlowCount
	for _, v := range per {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
		c.DroppedPackets += v.DroppedPackets
		c.DroppedBytes += v.DroppedBytes
	}
	return c
}
