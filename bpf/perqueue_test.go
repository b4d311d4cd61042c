//go:build linux

package bpf_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
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

// TestPerQueueRules: with rules, each queue's block holds what rules
// decided on that queue too (the rule's counter, and a class counted under
// the action a rule gave it), the overflow block those of every higher
// queue; the per-CPU and summed views add up to the frames sent.
func TestPerQueueRules(t *testing.T) {
	ns := testns.New(t)
	idx, _, err := ns.AddVethQueues("xdpq0", "xdpq1", 101)
	require.NoError(t, err)
	policy := bpf.Policy{DropAll: true, PerQueue: true, Rules: []bpf.Rule{
		{Name: "dns", Protocols: []uint8{frames.ProtoUDP}, DstPorts: []bpf.PortRange{{Lo: 53, Hi: 53}}},
	}}
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	defer p.Close()

	dns := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 53)))
	other := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 9)))
	type sent struct{ dns, other int }
	runs := map[uint32]sent{3: {2, 1}, 63: {0, 4}, 64: {5, 0}, 100: {7, 3}}
	require.NoError(t, ns.Do(func() error {
		for queue, n := range runs {
			for _, f := range []struct {
				frame   []byte
				n       int
				verdict uint32
			}{{dns, n.dns, xdpPass}, {other, n.other, xdpDrop}} {
				for i := 0; i < f.n; i++ {
					verdict, err := p.XDP().Run(&ebpf.RunOptions{
						Data:    f.frame,
						Context: &txgen.XdpMd{DataEnd: uint32(len(f.frame)), IngressIfindex: uint32(idx), RxQueueIndex: queue},
					})
					if err != nil {
						return err
					}
					if verdict != f.verdict {
						return fmt.Errorf("queue %d: verdict %d, want %d", queue, verdict, f.verdict)
					}
				}
			}
		}
		return nil
	}))

	udp := bpf.IPv4Class(frames.ProtoUDP)
	type seen struct{ pass, drop, rule uint64 }
	got := map[int]seen{}
	var b bpf.Block
	require.NoError(t, p.ReadPerQueue(&b, func(queue, cpu int, b *bpf.Block) {
		require.Equal(t, -1, cpu)
		got[queue] = seen{b.Class[udp][bpf.ActionPass].Packets, b.Class[udp][bpf.ActionDrop].Packets, b.Rule[0].Packets}
	}))
	require.Equal(t, map[int]seen{3: {2, 1, 2}, 63: {0, 4, 0}, 64: {12, 3, 12}}, got)

	perCPU := map[int]seen{}
	require.NoError(t, p.ReadPerQueueCPU(&b, func(queue, cpu int, b *bpf.Block) {
		s := perCPU[queue]
		s.pass += b.Class[udp][bpf.ActionPass].Packets
		s.drop += b.Class[udp][bpf.ActionDrop].Packets
		s.rule += b.Rule[0].Packets
		perCPU[queue] = s
	}))
	require.Equal(t, got, perCPU)

	require.NoError(t, p.ReadBlock(&b))
	require.Equal(t, bpf.Counter{Packets: 14, Bytes: uint64(14 * len(dns))}, b.Class[udp][bpf.ActionPass])
	require.Equal(t, bpf.Counter{Packets: 8, Bytes: uint64(8 * len(other))}, b.Class[udp][bpf.ActionDrop])
	require.Equal(t, bpf.Counter{Packets: 14, Bytes: uint64(14 * len(dns))}, b.Rule[0])
}
