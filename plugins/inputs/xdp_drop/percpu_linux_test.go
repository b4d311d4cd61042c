//go:build linux

package xdp_drop

import (
	"strconv"
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// allowedCPUs returns the CPUs this test may send from, as the affinity
// mask allows them (not 0..NumCPU-1).
func allowedCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := txgen.AllowedCPUs()
	require.NoError(t, err)
	require.NotEmpty(t, cpus)
	return cpus
}

// sendFromCPUs sends the mix rounds[i] times from cpus[i], one CPU after
// the other, out of the peer peerIdx.
func sendFromCPUs(t *testing.T, ns *testns.NS, peerIdx int, cpus, rounds []int, mix []traffic.Flow) {
	t.Helper()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error {
		for i, cpu := range cpus {
			for r := 0; r < rounds[i]; r++ {
				if err := txgen.OnCPU(cpu, func() error { return gen.SendFlows(peerIdx, mix) }); err != nil {
					return err
				}
			}
		}
		return nil
	}))
}

// viewKey is one series of a split view: the four default tags plus cpu
// and rx_queue when present.
type viewKey struct{ iface, family, protocol, action, cpu, queue string }

// splitView sums each series of a gather by all its tags.
func splitView(acc *testutil.Accumulator) map[viewKey][2]uint64 {
	out := map[viewKey][2]uint64{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() != "xdp_drop" {
			continue
		}
		tg := m.Tags()
		k := viewKey{tg["interface"], tg["family"], tg["protocol"], tg["action"], tg["cpu"], tg["rx_queue"]}
		pk, _ := m.GetField("packets")
		by, _ := m.GetField("bytes")
		g := out[k]
		out[k] = [2]uint64{g[0] + pk.(uint64), g[1] + by.(uint64)}
	}
	return out
}

// expectedView is the split view of the mix sent rounds times on iface from
// cpu into queue (either empty when its view is off).
func expectedView(into map[viewKey][2]uint64, iface string, mix []traffic.Flow, rounds int, cpu, queue string, action func(bpf.Class) string) {
	for i, c := range traffic.Expected(mix) {
		if c.Packets == 0 {
			continue
		}
		class := bpf.Class(i)
		k := viewKey{iface, class.Family().String(), classProtocol(class), action(class), cpu, queue}
		g := into[k]
		into[k] = [2]uint64{g[0] + c.Packets*uint64(rounds), g[1] + c.Bytes*uint64(rounds)}
	}
}

func dropsTCP(c bpf.Class) string {
	if p, ok := c.Protocol(); ok && p == 6 {
		return "drop"
	}
	return "pass"
}

// TestPerCPUTagsTheSendingCPU sends from each CPU the test may use a
// different number of rounds of the mix, and checks that per_cpu reports
// under each cpu tag exactly what that CPU sent, class by class. A veth
// receives what CPU c sends on RX queue c modulo its queues, whose NAPI runs
// the program on c; with a queue per CPU no CPU handles another's frames.
func TestPerCPUTagsTheSendingCPU(t *testing.T) {
	ns := testns.New(t)
	cpus := allowedCPUs(t)
	_, peerIdx, err := ns.AddVethQueues("xdpc0", "xdpc1", cpus[len(cpus)-1]+1)
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpc0"}, Drop: []any{"tcp"}, Log: testutil.Logger{}})
	require.Empty(t, startPlugin(t, ns, p).Errors)

	mix := traffic.Mix()
	rounds := make([]int, len(cpus))
	want := map[viewKey][2]uint64{}
	summedWant := map[viewKey][2]uint64{}
	var total uint64
	for i, cpu := range cpus {
		rounds[i] = i + 1
		expectedView(want, "xdpc0", mix, rounds[i], strconv.Itoa(cpu), "", dropsTCP)
		expectedView(summedWant, "xdpc0", mix, rounds[i], "", "", dropsTCP)
		total += uint64(traffic.Total(mix) * rounds[i])
	}
	sendFromCPUs(t, ns, peerIdx, cpus, rounds, mix)
	summed := gatherUntil(t, ns, p, total)
	require.Equal(t, summedWant, splitView(summed), "the summed view")

	p.PerCPU = true
	perCPU := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(perCPU) })
	require.Equal(t, want, splitView(perCPU), "per_cpu: each cpu tag holds what that CPU sent (CPUs %v, rounds %v)", cpus, rounds)
}

// TestPerCPUAndPerQueue: with both views on, every point carries the queue
// and the CPU (the eth1/q3/c0 rows of the watch view), each exact.
func TestPerCPUAndPerQueue(t *testing.T) {
	const queues = 4
	ns := testns.New(t)
	// One CPU per queue, so that no queue's NAPI serves two CPUs.
	var cpus []int
	used := map[int]bool{}
	for _, cpu := range allowedCPUs(t) {
		if !used[cpu%queues] {
			used[cpu%queues] = true
			cpus = append(cpus, cpu)
		}
	}
	_, peerIdx, err := ns.AddVethQueues("xdpq0", "xdpq1", queues)
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpq0"}, Drop: []any{"tcp"}, PerCPU: true, PerQueue: true, Log: testutil.Logger{}})
	require.Empty(t, startPlugin(t, ns, p).Errors)

	mix := traffic.Mix()
	rounds := make([]int, len(cpus))
	want := map[viewKey][2]uint64{}
	var total uint64
	for i, cpu := range cpus {
		rounds[i] = i + 1
		expectedView(want, "xdpq0", mix, rounds[i], strconv.Itoa(cpu), queueTag(cpu%queues), dropsTCP)
		total += uint64(traffic.Total(mix) * rounds[i])
	}
	sendFromCPUs(t, ns, peerIdx, cpus, rounds, mix)
	acc := gatherUntil(t, ns, p, total)
	require.Equal(t, want, splitView(acc), "CPUs %v, rounds %v", cpus, rounds)
}
