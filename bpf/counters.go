//go:build linux

package bpf

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// Counters holds one counter per class.
type Counters [ClassCount]Counter

// Block is what a counter block holds: every frame under its class and the
// action it got (Class[class][action]), and every frame a rule decided
// under that rule.
//
// The kernel keeps it in two maps: counters holds, per class, the frames
// that got the class's own action (every frame, without rules), and
// rule_counters, which only rules touch, the frames a rule gave the other
// action and the counters of the rules. A read puts them together.
type Block struct {
	Class [ClassCount][ActionCount]Counter
	Rule  [MaxRules]Counter
}

const counterSize = unsafe.Sizeof(Counter{})

// The kernel's blocks must be the counters they hold, back to back.
var (
	_ [unsafe.Sizeof(xdpDropCounterBlock{}) - uintptr(ClassCount)*counterSize]struct{}
	_ [uintptr(ClassCount)*counterSize - unsafe.Sizeof(xdpDropCounterBlock{})]struct{}
	_ [unsafe.Sizeof(xdpDropRuleBlock{}) - uintptr(ClassCount+MaxRules)*counterSize]struct{}
	_ [uintptr(ClassCount+MaxRules)*counterSize - unsafe.Sizeof(xdpDropRuleBlock{})]struct{}
)

// set makes b what one CPU counted: k, the counters map's block, holds
// each class c under its own action own[c]; r, the rule_counters block
// (nil without rules), the other action and the rules.
func (b *Block) set(k *xdpDropCounterBlock, r *xdpDropRuleBlock, own *[ClassCount]uint8) {
	for c := range b.Class {
		a := own[c] & 1
		b.Class[c][a] = Counter{k.Class[c].Packets, k.Class[c].Bytes}
		b.Class[c][1-a] = Counter{}
	}
	b.Rule = [MaxRules]Counter{}
	if r != nil {
		b.addRules(r, own)
	}
}

// add adds what one CPU counted to b, as set.
func (b *Block) add(k *xdpDropCounterBlock, r *xdpDropRuleBlock, own *[ClassCount]uint8) {
	for c := range b.Class {
		a := own[c] & 1
		b.Class[c][a].Packets += k.Class[c].Packets
		b.Class[c][a].Bytes += k.Class[c].Bytes
	}
	if r != nil {
		b.addRules(r, own)
	}
}

// addRules adds a rule_counters block to b: other[c] under the action that
// is not class c's own, and the rules.
func (b *Block) addRules(r *xdpDropRuleBlock, own *[ClassCount]uint8) {
	for c := range b.Class {
		a := 1 - own[c]&1
		b.Class[c][a].Packets += r.Other[c].Packets
		b.Class[c][a].Bytes += r.Other[c].Bytes
	}
	for i := range b.Rule {
		b.Rule[i].Packets += r.Rule[i].Packets
		b.Rule[i].Bytes += r.Rule[i].Bytes
	}
}

// empty reports whether no frame was counted in b.
func (b *Block) empty() bool {
	for c := range b.Class {
		for a := range b.Class[c] {
			if b.Class[c][a].Packets != 0 {
				return false
			}
		}
	}
	return true
}

// Totals sums the class counters over actions into dst.
func (b *Block) Totals(dst *Counters) {
	for c := range dst {
		dst[c] = Counter{}
		for a := range b.Class[c] {
			dst[c].Packets += b.Class[c][a].Packets
			dst[c].Bytes += b.Class[c][a].Bytes
		}
	}
}

// BlockFunc receives one block of counters that has seen traffic: queue is
// its RX queue (QueueSlots-1 holds every queue past the others) or -1 when
// summed over queues, cpu its CPU or -1 when summed over CPUs. c is reused
// by the next call.
type BlockFunc func(queue, cpu int, b *Block)

// ReadSum sums the counters over CPUs and queues into dst and calls f with
// them unless they are all empty.
func (p *Program) ReadSum(dst *Block, f BlockFunc) error {
	err := p.eachSlot(func(q int) {
		for cpu := range p.perCPU {
			if q == 0 && cpu == 0 {
				dst.set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			} else {
				dst.add(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			}
		}
	})
	if err != nil {
		return err
	}
	emit(dst, -1, -1, f)
	return nil
}

// ReadPerQueue calls f for every RX queue with traffic, summed over CPUs.
// A program loaded without PerQueue has one block: it is read as ReadSum.
func (p *Program) ReadPerQueue(dst *Block, f BlockFunc) error {
	if p.slots == 1 {
		return p.ReadSum(dst, f)
	}
	return p.eachSlot(func(q int) {
		for cpu := range p.perCPU {
			if cpu == 0 {
				dst.set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			} else {
				dst.add(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			}
		}
		emit(dst, q, -1, f)
	})
}

// ReadPerCPU calls f for every CPU with traffic, summed over queues.
func (p *Program) ReadPerCPU(f BlockFunc) error {
	if len(p.sums) != len(p.perCPU) {
		p.sums = make([]Block, len(p.perCPU))
	}
	sums := p.sums
	err := p.eachSlot(func(q int) {
		for cpu := range sums {
			if q == 0 {
				sums[cpu].set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			} else {
				sums[cpu].add(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			}
		}
	})
	if err != nil {
		return err
	}
	for cpu := range sums {
		emit(&sums[cpu], -1, cpu, f)
	}
	return nil
}

// ReadPerQueueCPU calls f for every RX queue and CPU with traffic. A
// program loaded without PerQueue has one block: it is read as ReadPerCPU.
func (p *Program) ReadPerQueueCPU(dst *Block, f BlockFunc) error {
	if p.slots == 1 {
		return p.ReadPerCPU(f)
	}
	return p.eachSlot(func(q int) {
		for cpu := range p.perCPU {
			dst.set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			emit(dst, q, cpu, f)
		}
	})
}

// ruleBlock is the rule_counters block eachSlot read for cpu, nil without rules.
func (p *Program) ruleBlock(cpu int) *xdpDropRuleBlock {
	if p.perCPURules == nil {
		return nil
	}
	return &p.perCPURules[cpu]
}

// eachSlot reads the counter blocks of every queue slot, one per CPU, into
// p.perCPU, and those of rule_counters into p.perCPURules when the program
// has rules, and calls f; they are overwritten by the next slot's.
func (p *Program) eachSlot(f func(slot int)) error {
	for q := uint32(0); q < p.slots; q++ {
		if err := lookup(p.objs.Counters, q, unsafe.Pointer(&p.perCPU[0])); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		runtime.KeepAlive(p.perCPU)
		if p.perCPURules != nil {
			if err := lookup(p.objs.RuleCounters, q, unsafe.Pointer(&p.perCPURules[0])); err != nil {
				return fmt.Errorf("read rule counters: %w", err)
			}
			runtime.KeepAlive(p.perCPURules)
		}
		f(int(q))
	}
	return nil
}

// mapLookupAttr is the BPF_MAP_LOOKUP_ELEM part of union bpf_attr.
type mapLookupAttr struct {
	mapFd uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

// lookup reads the blocks of key q of the per-CPU array m, one per CPU, into
// value with one BPF_MAP_LOOKUP_ELEM: the kernel writes them back to back
// (their size is a multiple of 8), which is the layout of a slice of them;
// the caller keeps that slice alive. cilium/ebpf's per-CPU Lookup would
// allocate a buffer as large and unmarshal it through reflection at every
// call, most of the cost of a gather.
func lookup(m *ebpf.Map, q uint32, value unsafe.Pointer) error {
	attr := mapLookupAttr{
		mapFd: uint32(m.FD()),
		key:   unsafe.Pointer(&q),
		value: value,
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return errno
	}
	return nil
}

// emit calls f for a block that has seen traffic.
func emit(b *Block, queue, cpu int, f BlockFunc) {
	if !b.empty() {
		f(queue, cpu, b)
	}
}

// ReadBlock sums the counters over CPUs and queues into dst.
func (p *Program) ReadBlock(dst *Block) error {
	return p.ReadSum(dst, func(int, int, *Block) {})
}

// ReadCounters sums the class counters over CPUs, queues and actions into dst.
func (p *Program) ReadCounters(dst *Counters) error {
	var b Block
	if err := p.ReadBlock(&b); err != nil {
		return err
	}
	b.Totals(dst)
	return nil
}

// RuleMemory is the kernel memory the program's rule maps (rule_counters
// among them) take, as the kernel accounts it (memlock), 0 without rules.
// The rule maps are the instance's, shared by its programs: each program
// of an instance reports them.
func (p *Program) RuleMemory() (uint64, error) {
	var total uint64
	if p.objs.RuleCounters != nil {
		n, err := mapMemory(p.objs.RuleCounters)
		if err != nil {
			return 0, fmt.Errorf("read map %s info: %w", xdpDropMapRuleCounters, err)
		}
		total += n
	}
	if p.in.ruleMaps != nil {
		n, err := p.in.ruleMaps.memory()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
