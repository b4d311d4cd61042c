//go:build linux

package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rodataMap is the kernel name of the program's constants (the verdict
// table, dry_run, the rules' constants).
const rodataMap = ".rodata"

// ErrObserveNeedsSysAdmin is returned when the program attached to an
// interface cannot be opened: only CAP_SYS_ADMIN opens a program by its id.
var ErrObserveNeedsSysAdmin = errors.New("opening another process's XDP program by its id needs CAP_SYS_ADMIN: run -watch as root (sudo)")

// PolicyMismatchError says the xdp_drop program attached to an interface
// was not loaded from the policy given: its counters cannot be read as
// that policy's.
type PolicyMismatchError struct {
	ID     ebpf.ProgramID
	Reason string
}

func (e *PolicyMismatchError) Error() string {
	return fmt.Sprintf("XDP program id %d (%s) was loaded from another config, or by another version: %s", e.ID, ProgramName, e.Reason)
}

// Observe opens, read-only, the xdp_drop program another process attached
// to ifindex, and its counters: the returned Program reads them like its
// own, and closing it releases only this process's descriptors. Nothing is
// attached, detached or written. owners are the processes that hold its
// link (none when none can be seen: attached through netlink, or kept by
// a pin). A program that is not xdp_drop's is an *ExistingProgramError; one
// loaded from another policy (its constants or its counters' shapes differ
// from what policy gives) a *PolicyMismatchError.
func Observe(ifindex int, policy Policy) (p *Program, owners []Owner, err error) {
	id, attachMode, err := xdpProgramOn(ifindex)
	if err != nil {
		return nil, nil, err
	}
	if id == 0 {
		return nil, nil, fmt.Errorf("interface index %d has no XDP program attached", ifindex)
	}
	prog, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, unix.EPERM) {
		return nil, nil, fmt.Errorf("XDP program id %d: %w", id, ErrObserveNeedsSysAdmin)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open XDP program id %d: %w", id, err)
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
		return nil, nil, fmt.Errorf("read info of XDP program id %d: %w", id, err)
	}
	if info.Type != ebpf.XDP || info.Name != ProgramName {
		return nil, nil, &ExistingProgramError{ID: id, Name: info.Name}
	}
	if err := openMaps(info, maps); err != nil {
		return nil, nil, fmt.Errorf("XDP program id %d: %w", id, err)
	}
	in := NewInstance(policy)
	spec, err := in.spec()
	if err != nil {
		return nil, nil, err
	}
	if maps[xdpDropMapCounters] == nil || maps[rodataMap] == nil {
		return nil, nil, &PolicyMismatchError{ID: id, Reason: "it has no counters or constants of this build's program"}
	}
	if reason := sameConstants(spec, maps[rodataMap]); reason != "" {
		return nil, nil, &PolicyMismatchError{ID: id, Reason: reason}
	}
	if !continuable(spec, in.rules, maps[xdpDropMapCounters], maps[xdpDropMapRuleCounters]) {
		return nil, nil, &PolicyMismatchError{ID: id, Reason: "its counters have another shape (rules, or per_queue, differ)"}
	}
	if owners, err = linkOwners(ifindex, id); err != nil {
		return nil, nil, err
	}
	if p, err = in.newProgram(); err != nil {
		return nil, nil, err
	}
	p.objs = objects{Prog: prog, Counters: maps[xdpDropMapCounters], RuleCounters: maps[xdpDropMapRuleCounters]}
	maps[rodataMap].Close() // read: the comparison is done
	p.id, p.observed = id, ifindex
	if m, ok := attachedMode(attachMode); ok {
		p.mode = m.mode
	}
	return p, owners, nil
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
// those spec sets, and says which differ ("" when none does).
func sameConstants(spec *ebpf.CollectionSpec, rodata *ebpf.Map) string {
	data, err := rodata.LookupBytes(uint32(0))
	if err != nil {
		return fmt.Sprintf("its constants cannot be read: %v", err)
	}
	var differ []string
	for name, v := range spec.Variables {
		// The exact-prefix hash key is drawn at every load, not configured.
		if v.SectionName != rodataMap || name == xdpDropVarPrefixHashKey {
			continue
		}
		end := int(v.Offset) + len(v.Value)
		if end > len(data) || !bytes.Equal(data[v.Offset:end], v.Value) {
			differ = append(differ, name)
		}
	}
	if len(differ) == 0 {
		return ""
	}
	slices.Sort(differ)
	return fmt.Sprintf("its constants %s differ from this config's (the drop list, dry_run, per_queue or the rules)", strings.Join(differ, ", "))
}

// linkOwners lists the processes other than this one that hold the link
// attaching program id to ifindex.
func linkOwners(ifindex int, id ebpf.ProgramID) ([]Owner, error) {
	l, err := findXDPLink(ifindex, id)
	if err != nil || l == nil {
		return nil, err
	}
	info, err := l.Info()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("read link info of program %d: %w", id, err)
	}
	owners, _, err := processesHolding(info.ID)
	if err != nil {
		return nil, err
	}
	var others []Owner
	for _, h := range owners {
		if h.PID != os.Getpid() {
			others = append(others, h)
		}
	}
	return others, nil
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
