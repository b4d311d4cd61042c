//go:build linux

package bpf_test

import (
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestReadSkipsEmptyBlocks: every split of a read calls back for the blocks
// with traffic only: for none before the first frame, then for the one
// queue, CPU, or queue and CPU that counted, with its exact count.
func TestReadSkipsEmptyBlocks(t *testing.T) {
	testns.RequirePrivileged(t)
	p, err := bpf.Load(bpf.Policy{DropAll: true, PerQueue: true})
	require.NoError(t, err)
	defer p.Close()

	type block struct {
		queue, cpu int
		packets    uint64
	}
	var scratch bpf.Block
	reads := map[string]func(bpf.BlockFunc) error{
		"sum":           func(f bpf.BlockFunc) error { return p.ReadSum(&scratch, f) },
		"per queue":     func(f bpf.BlockFunc) error { return p.ReadPerQueue(&scratch, f) },
		"per CPU":       p.ReadPerCPU,
		"per queue+CPU": func(f bpf.BlockFunc) error { return p.ReadPerQueueCPU(&scratch, f) },
	}
	class := bpf.IPv4Class(frames.ProtoUDP)
	blocks := func(read func(bpf.BlockFunc) error) []block {
		var got []block
		require.NoError(t, read(func(queue, cpu int, b *bpf.Block) {
			got = append(got, block{queue, cpu, b.Class[class][bpf.ActionDrop].Packets})
		}))
		return got
	}
	for name, read := range reads {
		require.Empty(t, blocks(read), "%s: a block before any traffic", name)
	}

	// The last CPU this test may run on: with two or more, not CPU 0,
	// which could hide a CPU index taken for a queue index.
	allowed, err := txgen.AllowedCPUs()
	require.NoError(t, err)
	cpu := allowed[len(allowed)-1]
	frame := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, txgen.OnCPU(cpu, func() error {
		return bpf.RunEach(p.XDP(), &ebpf.RunOptions{Data: frame, Context: &txgen.XdpMd{DataEnd: uint32(len(frame))}}, 3)
	}))
	want := map[string][]block{
		"sum":           {{-1, -1, 3}},
		"per queue":     {{0, -1, 3}},
		"per CPU":       {{-1, cpu, 3}},
		"per queue+CPU": {{0, cpu, 3}},
	}
	for name, read := range reads {
		require.Equal(t, want[name], blocks(read), name)
	}
}
