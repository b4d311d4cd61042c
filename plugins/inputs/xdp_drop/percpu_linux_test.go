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

// TestPerCPUSumsToTotal sends traffic from every CPU in turn and checks that
// the per_cpu view, summed over its cpu tags, equals the summed view.
func TestPerCPUSumsToTotal(t *testing.T) {
	ns := testns.New(t)
	p := &XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"tcp"}, Log: testutil.Logger{}}
	startPlugin(t, ns, p)

	gen, err := traffic.NewGenerator()
	require.NoError(t, err)
	defer gen.Close()
	mix := traffic.Mix()
	cpus := runtime.NumCPU()
	require.NoError(t, ns.Do(func() error {
		for cpu := 0; cpu < cpus; cpu++ {
			if err := traffic.OnCPU(cpu, func() error { return gen.SendFlows(ns.PeerIdx, mix) }); err != nil {
				return err
			}
		}
		return nil
	}))
	total := uint64(traffic.Total(mix) * cpus)
	summed := gatherUntil(t, ns, p, total)

	p.PerCPU = true
	perCPU := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(perCPU) })

	type key struct{ iface, family, protocol, action string }
	want := map[key][2]uint64{}
	for _, m := range summed.GetTelegrafMetrics() {
		if m.Name() == "xdp_drop" {
			tg := m.Tags()
			pk, _ := m.GetField("packets")
			by, _ := m.GetField("bytes")
			want[key{tg["interface"], tg["family"], tg["protocol"], tg["action"]}] = [2]uint64{pk.(uint64), by.(uint64)}
		}
	}
	got := map[key][2]uint64{}
	seen := map[string]bool{}
	for _, m := range perCPU.GetTelegrafMetrics() {
		if m.Name() != "xdp_drop" {
			continue
		}
		tg := m.Tags()
		require.Contains(t, tg, "cpu")
		seen[tg["cpu"]] = true
		k := key{tg["interface"], tg["family"], tg["protocol"], tg["action"]}
		pk, _ := m.GetField("packets")
		by, _ := m.GetField("bytes")
		g := got[k]
		got[k] = [2]uint64{g[0] + pk.(uint64), g[1] + by.(uint64)}
	}
	require.Equal(t, want, got)
	require.Equal(t, total, packetsOf(summed, testns.Dev))
	require.Len(t, seen, cpus, "traffic sent from every CPU is counted on every CPU")
}
