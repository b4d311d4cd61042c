//go:build linux

// Package traffic sends real frames through a veth pair with BPF_PROG_TEST_RUN
// in live-frames mode: a program that returns XDP_TX on one end hands each
// frame to the other end's receive path.
package traffic

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Batch is the most frames sent per BPF_PROG_TEST_RUN call. Live-frames mode
// recycles its pages without re-initialising them, so a receiver that
// rewrites frames (VLAN untagging on XDP_PASS) corrupts any later batch.
const Batch = 64

// Generator transmits frames out of an interface with XDP_TX.
type Generator struct {
	prog *ebpf.Program
}

// NewGenerator loads the XDP_TX program.
func NewGenerator() (*Generator, error) {
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

// Close releases the generator.
func (g *Generator) Close() error { return g.prog.Close() }

// XdpMd is struct xdp_md, the context BPF_PROG_TEST_RUN takes for XDP.
type XdpMd struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

// Send transmits count copies of frame out of the interface ifindex, in calls
// of at most Batch frames. The calling thread must be in the interface's
// network namespace. wait, if not nil, is called after each call, to let the
// receiver drain before the next one.
func (g *Generator) Send(ifindex int, frame []byte, count int, wait func(sent int) error) error {
	if len(frame) < 14 {
		return errors.New("live frames need at least 14 bytes")
	}
	for sent := 0; sent < count; {
		n := min(count-sent, Batch)
		_, err := g.prog.Run(&ebpf.RunOptions{
			Data:      frame,
			Repeat:    uint32(n),
			Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
			BatchSize: Batch,
			Context:   &XdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)},
		})
		if err != nil {
			return fmt.Errorf("send %d frames out of ifindex %d: %w", n, ifindex, err)
		}
		sent += n
		if wait != nil {
			if err := wait(sent); err != nil {
				return err
			}
		}
	}
	return nil
}

// SendBulk transmits count copies of frame as fast as the kernel takes them,
// in calls of repeat frames (batches of Batch), for throughput runs whose
// receiver does not rewrite frames.
func (g *Generator) SendBulk(ifindex int, frame []byte, count, repeat int) error {
	for sent := 0; sent < count; {
		n := min(count-sent, repeat)
		_, err := g.prog.Run(&ebpf.RunOptions{
			Data:      frame,
			Repeat:    uint32(n),
			Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
			BatchSize: Batch,
			Context:   &XdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)},
		})
		if err != nil {
			return fmt.Errorf("send %d frames out of ifindex %d: %w", n, ifindex, err)
		}
		sent += n
	}
	return nil
}
