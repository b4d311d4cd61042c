//go:build linux

package bpf_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/frames"
	"github.com/xdp-drop/xdp_drop/internal/testns"
	"github.com/xdp-drop/xdp_drop/internal/txgen"
)

// TestPerQueueSlots runs frames as if received on RX queues 3, 63, 64 and
// 100 of a 101-queue veth: each queue below 64 gets its own block, the rest
// share the overflow block; the summed view still counts them all.
func TestPerQueueSlots(t *testing.T) {
	ns := testns.New(t)
	idx, _, err := ns.AddVethQueues("xdpq0", "xdpq1", 101)
	require.NoError(t, err)
	p, err := bpf.Load(bpf.Policy{DropAll: true, PerQueue: true})
	require.NoError(t, err)
	defer p.Close()

	frame := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	runs := map[uint32]int{3: 2, 63: 3, 64: 5, 100: 7}
	require.NoError(t, ns.Do(func() error {
		for queue, n := range runs {
			for i := 0; i < n; i++ {
				_, err := p.XDP().Run(&ebpf.RunOptions{
					Data:    frame,
					Context: &txgen.XdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(idx), RxQueueIndex: queue},
				})
				if err != nil {
					return err
				}
			}
		}
		return nil
	}))

	got := map[int]uint64{}
	var b bpf.Block
	require.NoError(t, p.ReadPerQueue(&b, func(queue, cpu int, b *bpf.Block) {
		require.Equal(t, -1, cpu)
		got[queue] = b.Class[bpf.IPv4Class(17)][bpf.ActionDrop].Packets
	}))
	require.Equal(t, map[int]uint64{3: 2, 63: 3, 64: 12}, got)

	var c bpf.Counters
	require.NoError(t, p.ReadCounters(&c))
	require.Equal(t, uint64(17), c[bpf.IPv4Class(17)].Packets)
	require.Equal(t, uint64(17*len(frame)), c[bpf.IPv4Class(17)].Bytes)
}
