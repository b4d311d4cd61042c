//go:build linux

package xdp_drop

import (
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// TestPerQueue uses a 4-queue veth: frames sent from CPU c arrive on RX
// queue c % 4, so each queue's rx_queue points must count exactly what was
// sent from its CPU (the i-th CPU sends the mix i+1 times).
func TestPerQueue(t *testing.T) {
	const queues = 4
	ns := testns.New(t)
	_, peerIdx, err := ns.AddVethQueues("xdpq0", "xdpq1", queues)
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpq0"}, Drop: []any{"udp"}, PerQueue: true, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)

	// One CPU per queue, so that no queue's NAPI serves two CPUs.
	var cpus, rounds []int
	used := map[int]bool{}
	for _, cpu := range allowedCPUs(t) {
		if !used[cpu%queues] {
			used[cpu%queues] = true
			cpus, rounds = append(cpus, cpu), append(rounds, len(cpus)+1)
		}
	}
	mix := traffic.Mix()
	sendFromCPUs(t, ns, peerIdx, cpus, rounds, mix)
	n := uint64(traffic.Total(mix))
	want := map[string]uint64{}
	var total uint64
	for i, cpu := range cpus {
		want[queueTag(cpu%queues)] += uint64(rounds[i]) * n
		total += uint64(rounds[i]) * n
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
