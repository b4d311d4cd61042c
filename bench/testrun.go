//go:build linux

package main

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// progTestRunAttr is the BPF_PROG_TEST_RUN part of union bpf_attr (pointers
// as unsafe.Pointer, so that they stay valid if the stack moves). The
// benchmark makes the syscall itself, rather than through ebpf.Program.Run,
// to see an EINTR (Run retries it, and the retry's CPU time would be counted)
// and the kernel's own duration.
type progTestRunAttr struct {
	progFd      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      unsafe.Pointer
	dataOut     unsafe.Pointer
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       unsafe.Pointer
	ctxOut      unsafe.Pointer
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

// xdpMd is struct xdp_md as BPF_PROG_TEST_RUN takes it for XDP.
type xdpMd struct {
	data, dataEnd, dataMeta, ingressIfindex, rxQueueIndex, egressIfindex uint32
}

// testRun is one BPF_PROG_TEST_RUN call: what the program returned, the
// kernel's mean duration per run, and the CPU time of the calling thread.
type testRun struct {
	retval   uint32
	duration time.Duration // the kernel's, whole ns
	cpu      time.Duration // CLOCK_THREAD_CPUTIME_ID around the syscall
	wall     time.Duration
}

// errInterrupted is returned when the kernel stopped a run for a signal.
var errInterrupted = fmt.Errorf("test run interrupted")

// runXDP runs prog repeat times on frame. The caller must have locked its OS
// thread, so that the thread CPU time read before and after is one thread's.
// With live set, frames are transmitted for real out of ifindex (XDP_TX) in
// batches of batch.
func runXDP(prog *ebpf.Program, frame []byte, repeat uint32, live bool, ifindex int, batch uint32) (testRun, error) {
	ctx := xdpMd{dataEnd: uint32(len(frame)), ingressIfindex: uint32(ifindex)}
	attr := progTestRunAttr{
		progFd:     uint32(prog.FD()),
		dataSizeIn: uint32(len(frame)),
		dataIn:     unsafe.Pointer(&frame[0]),
		repeat:     repeat,
	}
	if live {
		attr.flags = unix.BPF_F_TEST_XDP_LIVE_FRAMES
		attr.batchSize = batch
		attr.ctxSizeIn = uint32(unsafe.Sizeof(ctx))
		attr.ctxIn = unsafe.Pointer(&ctx)
	}
	var c0, c1 unix.Timespec
	w0 := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
	wall := time.Since(w0)
	runtime.KeepAlive(frame)
	runtime.KeepAlive(&ctx)
	switch errno {
	case 0:
	case unix.EINTR:
		return testRun{}, errInterrupted
	default:
		return testRun{}, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
	}
	return testRun{
		retval:   attr.retval,
		duration: time.Duration(attr.duration),
		cpu:      time.Duration(c1.Nano() - c0.Nano()),
		wall:     wall,
	}, nil
}

// loadReturn loads an XDP program that does nothing but return verdict: the
// floor every XDP program stands on (XDP_DROP), or the traffic generator
// (XDP_TX, with live frames).
func loadReturn(name string, verdict int32) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    name,
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, verdict),
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	return prog, nil
}

const (
	xdpDrop = 1
	xdpPass = 2
	xdpTx   = 3
)
