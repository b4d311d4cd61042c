//go:build linux

package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rodataMap is the kernel name of the program's constants (the verdict
// table, dry_run, the rules' constants).
const rodataMap = ".rodata"

// Attachment is how an observed program is attached: through a BPF link
// (Link is its id) that Owners hold, or kept by a pin when none does; or
// through netlink (Link is 0), which no process holds.
type Attachment struct {
	Link   link.ID
	Owners []Owner // the processes other than this one that hold the link
}

// Observe opens, read-only, the xdp_drop program another process attached
// to ifindex, and its counters: the returned Program reads them like its
// own, and closing it releases only this process's descriptors. Nothing is
// attached, detached or written. The Attachment says how it is attached.
// A program that is not xdp_drop's is an *ExistingProgramError; one
// loaded from another policy (its constants or its counters' shapes differ
// from what policy gives) a *PolicyMismatchError.
func Observe(ifindex int, policy Policy) (p *Program, at Attachment, err error) {
	id, attachMode, err := xdpProgramOn(ifindex)
	if err != nil {
		return nil, at, err
	}
	if id == 0 {
		return nil, at, fmt.Errorf("interface index %d has no XDP program attached", ifindex)
	}
	prog, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, unix.EPERM) {
		return nil, at, fmt.Errorf("XDP program id %d: %w", id, ErrObserveNeedsSysAdmin)
	}
	if err != nil {
		return nil, at, fmt.Errorf("open XDP program id %d: %w", id, err)
	}
	maps := map[string]*ebpf.Map{}
	defer func() {
		if err != nil {
			prog.Close()
			for _, m := range maps {
				m.Close()
			}
		}
	}()
	info, err := prog.Info()
	if err != nil {
		return nil, at, fmt.Errorf("read info of XDP program id %d: %w", id, err)
	}
	if info.Type != ebpf.XDP || info.Name != ProgramName {
		return nil, at, &ExistingProgramError{ID: id, Name: info.Name}
	}
	if err := openMaps(info, maps); err != nil {
		return nil, at, fmt.Errorf("XDP program id %d: %w", id, err)
	}
	in := NewInstance(policy)
	spec, err := in.spec()
	if err != nil {
		return nil, at, err
	}
	if maps[xdpDropMapCounters] == nil || maps[rodataMap] == nil {
		return nil, at, &PolicyMismatchError{ID: id, Reason: "it has no counters or constants of this build's program"}
	}
	differ, err := sameConstants(spec, maps[rodataMap])
	if err != nil {
		return nil, at, &PolicyMismatchError{ID: id, Reason: fmt.Sprintf("its constants cannot be read: %v", err)}
	}
	if len(differ) > 0 {
		return nil, at, &PolicyMismatchError{ID: id, Constants: differ}
	}
	if !in.continuable(spec, maps[xdpDropMapCounters], maps[xdpDropMapRuleCounters]) {
		return nil, at, &PolicyMismatchError{ID: id, Shape: true}
	}
	if at, err = linkOwners(ifindex, id); err != nil {
		return nil, at, err
	}
	if p, err = in.newProgram(); err != nil {
		return nil, at, err
	}
	p.objs = objects{Prog: prog, Counters: maps[xdpDropMapCounters], RuleCounters: maps[xdpDropMapRuleCounters]}
	maps[rodataMap].Close() // read: the comparison is done
	p.id, p.observed = id, ifindex
	if m, ok := attachedMode(attachMode); ok {
		p.mode = m.mode
	}
	return p, at, nil
}

// openMaps opens the maps of the program info describes that a read
// needs, by their kernel names: its counters, rule counters and constants.
func openMaps(info *ebpf.ProgramInfo, maps map[string]*ebpf.Map) error {
	ids, ok := info.MapIDs()
	if !ok {
		return errors.New("the kernel does not list the program's maps (before 4.15)")
	}
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			return fmt.Errorf("open map id %d: %w", mid, err)
		}
		minfo, err := m.Info()
		if err != nil {
			m.Close()
			return fmt.Errorf("read info of map id %d: %w", mid, err)
		}
		switch name := minfo.Name; name {
		case xdpDropMapCounters, xdpDropMapRuleCounters, rodataMap:
			maps[name] = m
		default:
			m.Close()
		}
	}
	return nil
}

// sameConstants compares the constants the kernel holds in rodata with
// those spec sets, and names those that differ, sorted.
func sameConstants(spec *ebpf.CollectionSpec, rodata *ebpf.Map) ([]string, error) {
	data, err := rodata.LookupBytes(uint32(0))
	if err != nil {
		return nil, err
	}
	var differ []string
	for name, v := range spec.Variables {
		// The exact-prefix hash key is drawn at every load, and its table's
		// size follows the prefixes in force, which prefix files change live:
		// layout, not what the counters mean.
		if v.SectionName != rodataMap || name == xdpDropVarPrefixHashKey || name == xdpDropVarPrefixHashShift {
			continue
		}
		end := int(v.Offset) + len(v.Value)
		if end > len(data) || !bytes.Equal(data[v.Offset:end], v.Value) {
			differ = append(differ, name)
		}
	}
	slices.Sort(differ)
	return differ, nil
}

// linkOwners finds the link attaching program id to ifindex, if any, and
// the processes other than this one that hold it.
func linkOwners(ifindex int, id ebpf.ProgramID) (Attachment, error) {
	l, err := findXDPLink(ifindex, id)
	if err != nil || l == nil {
		return Attachment{}, err
	}
	info, err := l.Info()
	l.Close()
	if err != nil {
		return Attachment{}, fmt.Errorf("read link info of program %d: %w", id, err)
	}
	owners, _, err := processesHolding(info.ID)
	if err != nil {
		return Attachment{}, err
	}
	at := Attachment{Link: info.ID}
	for _, h := range owners {
		if h.PID != os.Getpid() {
			at.Owners = append(at.Owners, h)
		}
	}
	return at, nil
}

// Observed reports whether p is another process's program, opened by
// Observe: it has no link of p's own to detach.
func (p *Program) Observed() bool { return p.observed != 0 }

// stillAttached is Attached for an observed program: it is, while its
// interface runs it.
func (p *Program) stillAttached() error {
	id, _, err := xdpProgramOn(p.observed)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return ErrInterfaceGone
	case err != nil:
		return err
	case id != p.id:
		return fmt.Errorf("the observed XDP program id %d is no longer attached", p.id)
	}
	return nil
}
