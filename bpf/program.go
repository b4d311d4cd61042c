//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// Counters holds one counter per class, summed over CPUs.
type Counters [ClassCount]Counter

// ErrPermission is returned when the process may not load or attach BPF programs.
// CAP_PERFMON is among them because the verifier allows the program's
// variable-offset packet reads (IPv4 options, IPv6 extension headers) only
// to "root", which it takes to mean CAP_PERFMON.
var ErrPermission = errors.New("operation not permitted: needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (or root)")

// ErrNativeUnsupported is returned when the driver has no native XDP support.
var ErrNativeUnsupported = errors.New("driver does not support native XDP")

// ErrInterfaceGone is returned when the attached interface has been removed.
var ErrInterfaceGone = errors.New("interface was removed")

// ExistingProgramError is returned when the interface already runs an XDP
// program that this Program did not attach.
type ExistingProgramError struct {
	ID   ebpf.ProgramID
	Name string
}

func (e *ExistingProgramError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("interface already has XDP program id %d", e.ID)
	}
	return fmt.Sprintf("interface already has XDP program id %d (%s)", e.ID, e.Name)
}

// ProgramName is the kernel name of the XDP program, as bpftool shows it.
const ProgramName = "xdp_drop"

// Program is one loaded copy of the XDP program with its own counters,
// attached to at most one interface.
type Program struct {
	objs   xdpDropObjects
	link   link.Link
	mode   Mode
	id     ebpf.ProgramID
	perCPU []xdpDropCounterBlock
}

// Load loads the program with the given policy. The caller must Close it.
func Load(policy Policy) (*Program, error) {
	spec, err := loadXdpDrop()
	if err != nil {
		return nil, fmt.Errorf("read embedded XDP program: %w", err)
	}
	return load(spec, policy, nil)
}

// memlock raises RLIMIT_MEMLOCK once, and only on kernels that charge BPF
// memory to it (before 5.11); later kernels charge the memory cgroup.
var memlock = sync.OnceValue(rlimit.RemoveMemlock)

func load(spec *ebpf.CollectionSpec, policy Policy, opts *ebpf.CollectionOptions) (*Program, error) {
	if err := memlock(); err != nil {
		if errors.Is(err, unix.EPERM) {
			// Without CAP_BPF the probe for memcg accounting fails too.
			return nil, fmt.Errorf("load XDP program: %w", ErrPermission)
		}
		return nil, fmt.Errorf("raise RLIMIT_MEMLOCK for BPF maps (kernel before 5.11): %w", err)
	}
	var count uint32
	if err := spec.Variables[xdpDropVarClassCount].Get(&count); err != nil {
		return nil, fmt.Errorf("read class_count: %w", err)
	}
	if int(count) != ClassCount {
		return nil, fmt.Errorf("embedded XDP program has %d classes, loader expects %d: run make generate", count, ClassCount)
	}
	if err := spec.Variables[xdpDropVarVerdicts].Set(policy.verdicts()); err != nil {
		return nil, fmt.Errorf("set policy: %w", err)
	}

	p := &Program{}
	if err := spec.LoadAndAssign(&p.objs, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) && strings.Contains(fmt.Sprintf("%+v", ve), "prohibited for !root") {
			return nil, fmt.Errorf("load XDP program: %w", ErrPermission)
		}
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("load XDP program: %w", ErrPermission)
		}
		if ve != nil {
			return nil, fmt.Errorf("load XDP program: %+v", ve)
		}
		return nil, fmt.Errorf("load XDP program: %w", err)
	}
	info, err := p.objs.XdpDrop.Info()
	if err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("read XDP program info: %w", err)
	}
	p.id, _ = info.ID()
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	p.perCPU = make([]xdpDropCounterBlock, cpus)
	return p, nil
}

// ID is the kernel's id of the loaded program, as ip link and bpftool show it.
func (p *Program) ID() ebpf.ProgramID { return p.id }

// Mode is the mode the program is attached in, or "" when it is not attached.
func (p *Program) Mode() Mode { return p.mode }

// XDP returns the program itself, for BPF_PROG_TEST_RUN.
func (p *Program) XDP() *ebpf.Program { return p.objs.XdpDrop }

// Attach attaches the program to the interface with index ifindex. With
// ModeAuto it tries native mode first and falls back to generic; Mode then
// tells which took.
func (p *Program) Attach(ifindex int, mode Mode) error {
	if p.link != nil {
		return errors.New("program is already attached")
	}
	if mode == ModeAuto {
		err := p.attach(ifindex, ModeNative)
		if !errors.Is(err, ErrNativeUnsupported) {
			return err
		}
		return p.attach(ifindex, ModeGeneric)
	}
	return p.attach(ifindex, mode)
}

func (p *Program) attach(ifindex int, mode Mode) error {
	var flags link.XDPAttachFlags
	switch mode {
	case ModeNative:
		flags = link.XDPDriverMode
	case ModeGeneric:
		flags = link.XDPGenericMode
	case ModeOffload:
		flags = link.XDPOffloadMode
	default:
		return fmt.Errorf("unknown XDP mode %q", mode)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.XdpDrop, Interface: ifindex, Flags: flags})
	if err != nil {
		return attachError(ifindex, mode, err)
	}
	p.link = l
	p.mode = mode
	return nil
}

func attachError(ifindex int, mode Mode, err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return ErrPermission
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		if existing := existingProgram(ifindex); existing != nil {
			return existing
		}
	case errors.Is(err, unix.EOPNOTSUPP) && mode == ModeNative:
		return ErrNativeUnsupported
	}
	return fmt.Errorf("attach XDP in %s mode: %w", mode, err)
}

// Attached reports whether the attachment still holds; it returns
// ErrInterfaceGone when the kernel detached it because the interface went away.
func (p *Program) Attached() error {
	if p.link == nil {
		return errors.New("not attached")
	}
	info, err := p.link.Info()
	if err != nil {
		return fmt.Errorf("read link info: %w", err)
	}
	if xdp := info.XDP(); xdp == nil || xdp.Ifindex == 0 {
		return ErrInterfaceGone
	}
	return nil
}

// Detach removes the program from its interface; the counters stay readable.
func (p *Program) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	p.mode = ""
	if err != nil {
		return fmt.Errorf("detach XDP link: %w", err)
	}
	return nil
}

// Close detaches the program and releases it and its counters.
func (p *Program) Close() error {
	err := p.Detach()
	return errors.Join(err, p.objs.Close())
}

// ReadPerCPU reads the counters of every CPU and calls f for each CPU with
// traffic, with its counters in dst. dst is reused between calls.
func (p *Program) ReadPerCPU(dst *Counters, f func(cpu int, c *Counters)) error {
	if err := p.objs.Counters.Lookup(uint32(0), &p.perCPU); err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	for cpu := range p.perCPU {
		seen := false
		for c := range p.perCPU[cpu].Class {
			dst[c] = Counter{Packets: p.perCPU[cpu].Class[c].Packets, Bytes: p.perCPU[cpu].Class[c].Bytes}
			seen = seen || dst[c].Packets != 0
		}
		if seen {
			f(cpu, dst)
		}
	}
	return nil
}

// ReadCounters sums the per-CPU counters into dst.
func (p *Program) ReadCounters(dst *Counters) error {
	if err := p.objs.Counters.Lookup(uint32(0), &p.perCPU); err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	*dst = Counters{}
	for cpu := range p.perCPU {
		for c := range p.perCPU[cpu].Class {
			dst[c].Packets += p.perCPU[cpu].Class[c].Packets
			dst[c].Bytes += p.perCPU[cpu].Class[c].Bytes
		}
	}
	return nil
}
