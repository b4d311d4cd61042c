//go:build linux

package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// kernelMemPrefixes is the prefixes per family of the kernel memory row.
const kernelMemPrefixes = 10_000

// targetKernelMemRatio bounds the kernel memory of 64 interfaces with the
// same rules against one interface's: the rule maps are the instance's.
const targetKernelMemRatio = 1.2

type kernelMemResult struct {
	prefixes int // per family
	one      uint64
	many     uint64
	ifaces   int
	// shared is what the programs on many interfaces share (maps more than
	// one uses); the rest is each interface's own.
	shared uint64
}

// kernelMemory starts the plugin with 64 rules of ports and prefixes on
// one interface, then on every interface of names, and measures the
// kernel memory of what is attached: every program on the interfaces and
// every map they use, each once, as the kernel accounts it (memlock).
func kernelMemory(e *env, names []string) (kernelMemResult, error) {
	r := kernelMemResult{prefixes: kernelMemPrefixes, ifaces: len(names)}
	var err error
	if r.one, _, err = e.attachedMemory(names[:1]); err != nil {
		return r, fmt.Errorf("1 interface: %w", err)
	}
	if r.many, r.shared, err = e.attachedMemory(names); err != nil {
		return r, fmt.Errorf("%d interfaces: %w", len(names), err)
	}
	return r, nil
}

// memoryRules are 64 rules with ports and kernelMemPrefixes prefixes per
// family, as the plugin's config gives them.
func memoryRules() []xdp_drop.Rule {
	rules, _, _ := benchRules(true, true, kernelMemPrefixes)
	out := make([]xdp_drop.Rule, len(rules))
	for i, r := range rules {
		c := xdp_drop.Rule{Name: r.Name, Action: "drop", Protocol: []any{"tcp", "udp"}}
		for _, p := range r.SrcPrefixes {
			c.SrcPrefix = append(c.SrcPrefix, p.String())
		}
		for _, pr := range r.DstPorts {
			c.DstPort = append(c.DstPort, strconv.Itoa(int(pr.Lo))+"-"+strconv.Itoa(int(pr.Hi)))
		}
		out[i] = c
	}
	return out
}

func (e *env) attachedMemory(names []string) (total, shared uint64, err error) {
	x := xdp_drop.New()
	x.Interfaces, x.Drop, x.Rules, x.Log, x.HandoverTimeout = names, []any{"udp"}, memoryRules(), quietLogger{}, 0
	if err := x.Init(); err != nil {
		return 0, 0, err
	}
	err = e.ns.Do(func() error {
		for _, name := range names {
			if err := e.ns.CheckAttachable(name); err != nil {
				return err
			}
		}
		acc := &discardAccumulator{}
		if err := x.Start(acc); err != nil {
			return err
		}
		defer x.Stop()
		if err := acc.err(); err != nil {
			return err
		}
		var err error
		total, shared, err = e.memoryOn(names)
		return err
	})
	return total, shared, err
}

// memoryOn sums the memlock of the XDP programs on names and of every map
// they use, each map once; shared is that of the maps more than one uses.
func (e *env) memoryOn(names []string) (total, shared uint64, err error) {
	links, err := e.ns.Netlink().LinkList()
	if err != nil {
		return 0, 0, err
	}
	progs := map[string]uint32{}
	for _, l := range links {
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			progs[l.Attrs().Name] = x.ProgId
		}
	}
	users := map[ebpf.MapID]int{}
	size := map[ebpf.MapID]uint64{}
	for _, name := range names {
		id, ok := progs[name]
		if !ok || id == 0 {
			return 0, 0, fmt.Errorf("%s has no XDP program", name)
		}
		n, err := programMemory(ebpf.ProgramID(id), users, size)
		if err != nil {
			return 0, 0, err
		}
		total += n
	}
	for id, n := range size {
		total += n
		if users[id] > 1 {
			shared += n
		}
	}
	return total, shared, nil
}

// programMemory returns the memlock of program id, and counts it as a user
// of each map it uses, whose memlock goes to size.
func programMemory(id ebpf.ProgramID, users map[ebpf.MapID]int, size map[ebpf.MapID]uint64) (uint64, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return 0, err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return 0, err
	}
	total, _ := info.Memlock()
	ids, ok := info.MapIDs()
	if !ok {
		return 0, errors.New("the kernel does not list a program's maps")
	}
	for _, mid := range ids {
		users[mid]++
		if users[mid] > 1 {
			continue
		}
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			return 0, err
		}
		mi, err := m.Info()
		m.Close()
		if err != nil {
			return 0, err
		}
		size[mid], _ = mi.Memlock()
	}
	return total, nil
}
