//go:build linux

package txgen

import (
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Batch is the most frames sent per BPF_PROG_TEST_RUN call. Live-frames mode
// recycles its pages without re-initialising them, so a receiver that
// rewrites frames (VLAN untagging on XDP_PASS) corrupts any later batch.
const Batch = 64

// XdpMd is struct xdp_md, the context BPF_PROG_TEST_RUN takes for XDP.
type XdpMd struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

// sendLive runs the XDP_TX program on count copies of frame. Each call to
// BPF_PROG_TEST_RUN waits for an RCU grace period (tens of milliseconds), so
// frames go in as few calls as possible; a VLAN-tagged frame goes in calls
// of Batch, since the receiving stack untags it in place.
func (g *Generator) sendLive(ifindex int, frame []byte, count int) error {
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
			return fmt.Errorf("after %d: %w", sent, err)
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
