//go:build linux

// Package txgen sends real frames through a veth pair with BPF_PROG_TEST_RUN
// in live-frames mode: a program that returns XDP_TX on one end hands each
// frame to the other end's receive path. What to send (the standard mix and
// what it must count) is package traffic.
package txgen

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// Batch is the most frames sent per BPF_PROG_TEST_RUN call. Live-frames mode
// recycles its pages without re-initialising them, so a receiver that
// rewrites frames (VLAN untagging on XDP_PASS) corrupts any later batch.
const Batch = 64

// Generator transmits frames out of an interface with XDP_TX.
type Generator struct {
	prog *ebpf.Program
	runs *ebpf.Map // per-CPU count of frames transmitted; nil unless counting
}

// New loads the XDP_TX program.
func New() (*Generator, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "xdp_drop_txgen",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.LoadImm(asm.R0, 3, asm.DWord), // XDP_TX
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load XDP_TX generator: %w", err)
	}
	return &Generator{prog: prog}, nil
}

// NewCounting loads an XDP_TX program that also counts every frame
// it transmits, so that Sent reports what really left: BPF_PROG_TEST_RUN
// restarts a run a signal interrupted, sending more than asked.
func NewCounting() (*Generator, error) {
	runs, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("create the generator's frame counter: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "xdp_drop_txcnt",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word), // key 0
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, runs.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "tx"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),         // per-CPU: no atomic needed
			asm.LoadImm(asm.R0, 3, asm.DWord).WithSymbol("tx"), // XDP_TX
			asm.Return(),
		},
	})
	if err != nil {
		runs.Close()
		return nil, fmt.Errorf("load counting XDP_TX generator: %w", err)
	}
	return &Generator{prog: prog, runs: runs}, nil
}

// Sent returns how many frames a counting generator has transmitted.
func (g *Generator) Sent() (uint64, error) {
	if g.runs == nil {
		return 0, errors.New("not a counting generator (NewCountingGenerator)")
	}
	var perCPU []uint64
	if err := g.runs.Lookup(uint32(0), &perCPU); err != nil {
		return 0, fmt.Errorf("read the generator's frame counter: %w", err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// Close releases the generator.
func (g *Generator) Close() error {
	if g.runs != nil {
		g.runs.Close()
	}
	return g.prog.Close()
}

// XdpMd is struct xdp_md, the context BPF_PROG_TEST_RUN takes for XDP.
type XdpMd struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

// Send transmits count copies of frame out of the interface ifindex. The
// calling thread must be in the interface's network namespace. Each call to
// BPF_PROG_TEST_RUN waits for an RCU grace period (tens of milliseconds), so
// frames go in as few calls as possible; a VLAN-tagged frame goes in calls of
// Batch, since the receiving stack untags it in place.
func (g *Generator) Send(ifindex int, frame []byte, count int) error {
	if len(frame) < 14 {
		return errors.New("live frames need at least 14 bytes")
	}
	per := count
	if tagged(frame) {
		per = Batch
	}
	for sent := 0; sent < count; {
		n := min(count-sent, per)
		err := WithoutSignals(func() error {
			_, err := g.prog.Run(&ebpf.RunOptions{
				Data:      frame,
				Repeat:    uint32(n),
				Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
				BatchSize: Batch,
				Context:   &XdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)},
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("send %d frames out of ifindex %d: %w", n, ifindex, err)
		}
		sent += n
	}
	return nil
}

// WithoutSignals runs f with every signal blocked on the calling thread. A
// signal that arrives during a live-frames run (a child's SIGCHLD, the Go
// runtime's preemption) makes the kernel stop with EINTR after the batches
// it has already sent, and the BPF library then runs the whole count again:
// frames would be sent twice. Blocked, the signal waits for the run's end.
func WithoutSignals(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, &old); err != nil {
		return fmt.Errorf("block signals for the send: %w", err)
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return f()
}

func tagged(frame []byte) bool {
	et := uint16(frame[12])<<8 | uint16(frame[13])
	return et == 0x8100 || et == 0x88A8
}

// SendFlows sends every flow of a mix out of ifindex, in order.
func (g *Generator) SendFlows(ifindex int, flows []traffic.Flow) error {
	for _, f := range flows {
		if err := g.Send(ifindex, f.Frame, f.Count); err != nil {
			return fmt.Errorf("flow %s: %w", f.Name, err)
		}
	}
	return nil
}

// AllowedCPUs lists, in order, the CPUs the calling thread may run on: the
// ones OnCPU can bind to. A restricted affinity mask (taskset, a cgroup
// cpuset) need not start at CPU 0 nor be contiguous.
func AllowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// OnCPU runs f with the calling thread bound to cpu, then restores the
// thread's affinity. A veth receives what is sent from CPU c on its RX queue
// c (modulo its queues), so this spreads traffic over CPUs and queues. The
// caller must hold its OS thread (runtime.LockOSThread).
func OnCPU(cpu int, f func() error) error {
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &all)
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("bind to CPU %d: %w", cpu, err)
	}
	return f()
}
