//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

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
	slots  uint32 // counter blocks: 1, or QueueSlots with per-queue counting
}

// Load loads the program with the given policy. The caller must Close it.
func Load(policy Policy) (*Program, error) {
	spec, err := configuredSpec(policy)
	if err != nil {
		return nil, err
	}
	return load(spec, policy, nil)
}

// embeddedSpec parses the embedded ELF once; every load works on a copy.
var embeddedSpec = sync.OnceValues(loadXdpDrop)

// configuredSpec returns a copy of the program's spec set up for policy:
// the verdict table, the queue slots and the counter map's size.
func configuredSpec(policy Policy) (*ebpf.CollectionSpec, error) {
	parsed, err := embeddedSpec()
	if err != nil {
		return nil, fmt.Errorf("read embedded XDP program: %w", err)
	}
	spec := parsed.Copy()
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
	slots := uint32(0)
	if policy.PerQueue {
		slots = QueueSlots
	}
	if err := spec.Variables[xdpDropVarQueueSlots].Set(slots); err != nil {
		return nil, fmt.Errorf("set queue_slots: %w", err)
	}
	spec.Maps[xdpDropMapCounters].MaxEntries = policy.queueSlots()
	return spec, nil
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
	p := &Program{slots: policy.queueSlots()}
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

// Read reads the counters and calls f for every counter block with traffic:
// one per RX queue when the program counts per queue and perQueue is set
// (queue -1 otherwise: summed over queues), one per CPU when perCPU is set
// (cpu -1 otherwise: summed over CPUs). dst is reused between calls.
func (p *Program) Read(perQueue, perCPU bool, dst *Counters, f func(queue, cpu int, c *Counters)) error {
	perQueue = perQueue && p.slots > 1
	if !perQueue {
		*dst = Counters{}
	}
	cpus := len(p.perCPU)
	var sums []Counters // per-CPU sums over queues
	if perCPU && !perQueue {
		sums = make([]Counters, cpus)
	}
	for q := uint32(0); q < p.slots; q++ {
		if err := p.lookup(q); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		if perQueue {
			*dst = Counters{}
		}
		for cpu := range p.perCPU {
			block := &p.perCPU[cpu].Class
			switch {
			case perCPU && perQueue:
				for c := range block {
					dst[c] = Counter{Packets: block[c].Packets, Bytes: block[c].Bytes}
				}
				emit(dst, int(q), cpu, f)
			case perCPU:
				for c := range block {
					sums[cpu][c].Packets += block[c].Packets
					sums[cpu][c].Bytes += block[c].Bytes
				}
			default:
				for c := range block {
					dst[c].Packets += block[c].Packets
					dst[c].Bytes += block[c].Bytes
				}
			}
		}
		if perQueue && !perCPU {
			emit(dst, int(q), -1, f)
		}
	}
	switch {
	case perCPU && !perQueue:
		for cpu := range sums {
			emit(&sums[cpu], -1, cpu, f)
		}
	case !perCPU && !perQueue:
		f(-1, -1, dst)
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

// lookup reads the counter blocks of slot q, one per CPU, into p.perCPU with
// one BPF_MAP_LOOKUP_ELEM: the kernel writes them back to back (their size is
// a multiple of 8), which is the layout of the slice. cilium/ebpf's per-CPU
// Lookup would allocate a buffer as large and unmarshal it through reflection
// at every call, most of the cost of a gather.
func (p *Program) lookup(q uint32) error {
	attr := mapLookupAttr{
		mapFd: uint32(p.objs.Counters.FD()),
		key:   unsafe.Pointer(&q),
		value: unsafe.Pointer(&p.perCPU[0]),
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(p.perCPU)
	if errno != 0 {
		return errno
	}
	return nil
}

// emit calls f for a block that has seen traffic.
func emit(c *Counters, queue, cpu int, f func(queue, cpu int, c *Counters)) {
	for i := range c {
		if c[i].Packets != 0 {
			f(queue, cpu, c)
			return
		}
	}
}

// ReadCounters sums the counters over CPUs and queues into dst.
func (p *Program) ReadCounters(dst *Counters) error {
	return p.Read(false, false, dst, func(int, int, *Counters) {})
}
