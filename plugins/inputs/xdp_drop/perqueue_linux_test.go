//go:build linux

package xdp_drop

import (
	"runtime"
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testns"
	"github.com/xdp-drop/xdp_drop/internal/traffic"
)

// TestPerQueue uses a 4-queue veth: frames sent from CPU c arrive on RX
// queue c, so each queue's rx_queue points must count exactly what was sent
// from that CPU (the mix cpu+1 times).
func TestPerQueue(t *testing.T) {
	ns := testns.New(t)
	_, peerIdx, err := ns.AddVethQueues("xdpq0", "xdpq1", 4)
	require.NoError(t, err)
	p := &XDPDrop{Interfaces: []string{"xdpq0"}, Drop: []any{"udp"}, PerQueue: true, Log: testutil.Logger{}}
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)

	gen, err := traffic.NewGenerator()
	require.NoError(t, err)
	defer gen.Close()
	mix := traffic.Mix()
	cpus := min(runtime.NumCPU(), 4)
	require.NoError(t, ns.Do(func() error {
		for cpu := 0; cpu < cpus; cpu++ {
			for i := 0; i <= cpu; i++ {
				if err := traffic.OnCPU(cpu, func() error { return gen.SendFlows(peerIdx, mix) }); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	n := uint64(traffic.Total(mix))
	want := map[string]uint64{}
	var total uint64
	for cpu := 0; cpu < cpus; cpu++ {
		want[queueTag(cpu)] = uint64(cpu+1) * n
		total += uint64(cpu+1) * n
	}
	acc = gatherUntil(t, ns, p, total)
	got := map[string]uint64{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() != "xdp_drop" {
			continue
		}
		q, ok := m.GetTag("rx_queue")
		require.True(t, ok, "every point carries rx_queue")
		pk, _ := m.GetField("packets")
		got[q] += pk.(uint64)
	}
	require.Equal(t, want, got)
}

func TestQueueTag(t *testing.T) {
	require.Equal(t, "0", queueTag(0))
	require.Equal(t, "63", queueTag(63))
	require.Equal(t, "overflow", queueTag(64))
	require.Equal(t, "", queueTag(-1))
}
