//go:build linux

package xdp_drop

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// ruleMapNames are the kernel names of the rule maps an instance shares.
var ruleMapNames = []string{"prefix_buckets", "prefix_exact", "prefix_v4", "prefix_v6", "ports_map"}

// ruleMapIDs are the ids of the rule maps prog runs on, sorted.
func ruleMapIDs(t *testing.T, prog *bpf.Program) []ebpf.MapID {
	t.Helper()
	info, err := prog.XDP().Info()
	require.NoError(t, err)
	ids, ok := info.MapIDs()
	require.True(t, ok, "the kernel lists a program's maps")
	var out []ebpf.MapID
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		require.NoError(t, err)
		minfo, err := m.Info()
		m.Close()
		require.NoError(t, err)
		if slices.Contains(ruleMapNames, minfo.Name) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	require.Len(t, out, len(ruleMapNames), "every rule map")
	return out
}

// handOverInProcess hands a's interfaces and rule maps to a holder in this
// process, as its stop would to a holder process, stops a and returns the
// holder's directory. The holder is stopped when the test ends.
func handOverInProcess(t *testing.T, ns *testns.NS, a *XDPDrop) string {
	t.Helper()
	offers, _ := handoverOffers(a.links.ifaces, a.links.kernel.in)
	for i := range offers {
		offers[i].FDs = dupAll(t, offers[i].FDs...)
	}
	dir := hold(t, offers)
	a.HandoverTimeout = 0
	inNS(t, ns, a, func() error { a.Stop(); return nil })
	return dir
}

// ifacePackets is the packets of iface's xdp_drop points by family,
// protocol and action, and of its rule points by rule and action.
func ifacePackets(acc *testutil.Accumulator, iface string) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Tags()["interface"] != iface {
			continue
		}
		v, _ := m.GetField("packets")
		switch m.Name() {
		case MeasurementCounters:
			out[m.Tags()["family"]+"/"+m.Tags()["protocol"]+"/"+m.Tags()["action"]] += v.(uint64)
		case MeasurementRule:
			out["rule/"+m.Tags()["rule"]+"/"+m.Tags()["action"]] += v.(uint64)
		}
	}
	return out
}

// TestHandoverSharesRuleMaps: an instance with rules on one interface hands
// over to its successor, whose config adds two interfaces with the same
// rules, one before it, one after at an MTU that needs the multi-buffer
// program. The
// successor adopts the rule maps handed over: every program, the one taken
// over and the two loaded for the new interfaces, runs on the
// predecessor's one set, laid out under its key, and the new interfaces'
// frames are decided by the rules.
func TestHandoverSharesRuleMaps(t *testing.T) {
	ns := testns.New(t)
	_, peerB, err := ns.AddVeth("xdpb0", "xdpb0p")
	require.NoError(t, err)
	_, _, err = ns.AddVeth("xdpc0", "xdpc0p")
	require.NoError(t, err)
	for _, dev := range []string{"xdpc0", "xdpc0p"} {
		require.NoError(t, ns.SetMTU(dev, 9000))
	}
	// Host routes fill the exact-prefix hash table: looked up under another
	// key than the one they were laid out with, they would not be found.
	hosts := []string{"192.0.2.0/24"}
	for i := 1; i <= 200; i++ {
		hosts = append(hosts, fmt.Sprintf("10.1.%d.%d/32", i/100, i%100))
	}
	rules := []Rule{{Name: "block", Action: "drop", SrcPrefix: hosts}}

	a := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: rules, Log: testutil.Logger{}})
	require.Empty(t, startPlugin(t, ns, a).Errors)
	handedID := a.links.ifaces[0].prog.ID()
	handedMaps := ruleMapIDs(t, a.links.ifaces[0].prog)
	dir := handOverInProcess(t, ns, a)

	log := &testutil.CaptureLogger{}
	b := withDefaults(&XDPDrop{Interfaces: []string{"xdpb0", testns.Dev, "xdpc0"}, Rules: rules, Log: log})
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	progs := map[string]*bpf.Program{}
	for _, ifc := range b.links.ifaces {
		progs[ifc.name] = ifc.prog
	}
	require.Equal(t, handedID, progs[testns.Dev].ID(), "the handed-over program kept, counters and all")
	require.True(t, progs["xdpc0"].MultiBuffer(), "xdpc0's MTU needs the multi-buffer program")
	for _, ifc := range b.links.ifaces {
		require.Equal(t, handedMaps, ruleMapIDs(t, ifc.prog), "%s: on the one rule-map set handed over", ifc.name)
	}
	var infos []string
	for _, e := range log.Messages() {
		infos = append(infos, e.Text)
	}
	require.Contains(t, strings.Join(infos, "\n"), "handover: taken over the stopped instance's rule maps: every interface's program shares them")

	// The new interfaces decide by the rules: the hosts and the /24 dropped,
	// the rest passed.
	for _, name := range []string{"xdpb0", "xdpc0"} {
		for _, c := range []struct {
			src  string
			want uint32
		}{{"10.1.0.7", 1}, {"10.1.1.93", 1}, {"10.1.2.1", 2}, {"192.0.2.9", 1}, {"198.51.100.9", 2}} {
			verdict, err := progs[name].XDP().Run(&ebpf.RunOptions{Data: ipFrame(c.src, "10.0.0.1", frames.ProtoUDP, 1, 2)})
			require.NoError(t, err)
			require.Equal(t, c.want, verdict, "%s: a frame from %s (XDP_DROP 1, XDP_PASS 2)", name, c.src)
		}
	}
	udp := bpf.IPv4Class(frames.ProtoUDP)
	flows := []traffic.Flow{
		{Name: "host", Frame: ipFrame("10.1.0.7", "10.0.0.1", frames.ProtoUDP, 1, 2), Count: 3, Class: udp},
		{Name: "host2", Frame: ipFrame("10.1.1.93", "10.0.0.1", frames.ProtoUDP, 1, 2), Count: 2, Class: udp},
		{Name: "net", Frame: ipFrame("192.0.2.9", "10.0.0.1", frames.ProtoUDP, 1, 2), Count: 1, Class: udp},
		{Name: "other", Frame: ipFrame("198.51.100.9", "10.0.0.1", frames.ProtoUDP, 1, 2), Count: 4, Class: udp},
	}
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.SendFlows(peerB, flows) }))
	// The frames sent, and the test runs above (three dropped, two passed).
	got := ifacePackets(gatherUntil(t, ns, b, 10+5+5), "xdpb0")
	require.Equal(t, map[string]uint64{
		"ipv4/udp/drop": 6 + 3, "ipv4/udp/pass": 4 + 2,
		"rule/block/drop": 6 + 3,
	}, got)
}

// TestHandoverChangedRulesOwnMaps: a successor whose rules differ does not
// adopt the rule maps handed over: it loads its own, and says why.
func TestHandoverChangedRulesOwnMaps(t *testing.T) {
	ns := testns.New(t)
	a := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: []Rule{{Name: "block", Action: "drop", SrcPrefix: []string{"192.0.2.0/24"}}}, Log: testutil.Logger{}})
	require.Empty(t, startPlugin(t, ns, a).Errors)
	handedMaps := ruleMapIDs(t, a.links.ifaces[0].prog)
	dir := handOverInProcess(t, ns, a)

	log := &testutil.CaptureLogger{}
	b := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: []Rule{{Name: "block", Action: "drop", SrcPrefix: []string{"198.51.100.0/24"}}}, Log: log})
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	var infos []string
	for _, e := range log.Messages() {
		infos = append(infos, e.Text)
	}
	require.Contains(t, strings.Join(infos, "\n"), "handover: not taken over the stopped instance's rule maps: the rules or the program version changed: this instance loads its own")
	own := ruleMapIDs(t, b.links.ifaces[0].prog)
	for i := range own {
		require.NotEqual(t, handedMaps[i], own[i], "a rule-map set of its own")
	}
	verdict, err := b.links.ifaces[0].prog.XDP().Run(&ebpf.RunOptions{Data: ipFrame("198.51.100.9", "10.0.0.1", frames.ProtoUDP, 1, 2)})
	require.NoError(t, err)
	require.Equal(t, uint32(1), verdict, "the new rules in force")
}

// TestHandoverPrefixFileSameList: with a prefix file that holds what it
// held, the successor adopts the rule maps and keeps the handed-over
// program as it is: nothing to swap in.
func TestHandoverPrefixFileSameList(t *testing.T) {
	ns := testns.New(t)
	list := filepath.Join(t.TempDir(), "drop.txt")
	writeList(t, list, listV1...)
	rules := []Rule{{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}}}
	a := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: rules, Log: testutil.Logger{}})
	require.Empty(t, startPlugin(t, ns, a).Errors)
	handedID := a.links.ifaces[0].prog.ID()
	handedMaps := ruleMapIDs(t, a.links.ifaces[0].prog)
	dir := handOverInProcess(t, ns, a)

	b := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: rules, Log: testutil.Logger{}})
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	require.Equal(t, handedID, b.links.ifaces[0].prog.ID(), "not swapped: the list is the same")
	require.Equal(t, handedMaps, ruleMapIDs(t, b.links.ifaces[0].prog))
	verdict, err := b.links.ifaces[0].prog.XDP().Run(&ebpf.RunOptions{Data: bothV4})
	require.NoError(t, err)
	require.Equal(t, uint32(1), verdict, "the list's source dropped")
}

// TestHandoverChangedPolicyKeepsBudgets: a reload that changes only drop or
// dry_run hands the limiter over with the rule maps (their fingerprint
// leaves both out), so a ceiling spent before the reload stays spent after
// it: a reload never gives a sender a fresh burst. Of 200 frames after it,
// only what the rate (1 frame/s) refilled passes, not another 100.
func TestHandoverChangedPolicyKeepsBudgets(t *testing.T) {
	for _, change := range []string{"drop", "dry_run"} {
		t.Run(change, func(t *testing.T) {
			ns := testns.New(t)
			rules := []Rule{{Name: "ceiling", Action: "limit", Protocol: []any{"udp"}, DstPort: []any{int64(53)},
				Rate: int64(1), Burst: int64(100), Per: "rule"}}
			a := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"icmp"}, Rules: rules, Log: testutil.Logger{}})
			require.Empty(t, startPlugin(t, ns, a).Errors)
			frame := ipFrame("203.0.113.5", "198.51.100.53", frames.ProtoUDP, 40000, 53)
			spent := time.Now()
			send(t, ns, []traffic.Flow{{Name: "dns", Frame: frame, Count: 200}})
			pass, drop := limitPackets(t, gatherUntil(t, ns, a, 200), "ceiling")
			requireSpent(t, pass, drop, 100, 200, time.Since(spent))
			dir := handOverInProcess(t, ns, a)

			log := &testutil.CaptureLogger{}
			b := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"icmp"}, Rules: rules, Log: log})
			over := "drop"
			switch change {
			case "drop":
				b.Drop = []any{"icmp", "tcp"}
			case "dry_run":
				b.DryRun, over = true, "would_drop"
			}
			require.NoError(t, b.Init())
			b.links.handoff.dir = dir
			acc := &testutil.Accumulator{}
			inNS(t, ns, b, func() error { return b.Start(acc) })
			t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
			require.Empty(t, acc.Errors)

			// What b counts from: the counters go on, or start at zero.
			acc = &testutil.Accumulator{}
			inNS(t, ns, b, func() error { return b.Gather(acc) })
			before := ifacePackets(acc, testns.Dev)
			var total uint64
			for k, v := range before {
				if !strings.HasPrefix(k, "rule/") {
					total += v
				}
			}
			send(t, ns, []traffic.Flow{{Name: "dns", Frame: frame, Count: 200}})
			after := ifacePackets(gatherUntil(t, ns, b, total+200), testns.Dev)
			elapsed := time.Since(spent)
			passed := after["rule/ceiling/pass"] - before["rule/ceiling/pass"]
			require.Equal(t, uint64(200), passed+after["rule/ceiling/"+over]-before["rule/ceiling/"+over], "every frame decided by the rule")
			refilled := uint64(elapsed/time.Second) + 1
			require.LessOrEqual(t, passed, refilled, "of 200 frames after the reload (%v after the ceiling was spent): the budget spent stays spent", elapsed)
			t.Logf("%d of 200 passed after a reload that changed %s", passed, change)
			var infos []string
			for _, e := range log.Messages() {
				infos = append(infos, e.Text)
			}
			require.Contains(t, strings.Join(infos, "\n"), "handover: taken over the stopped instance's rule maps", "the limiter goes on with the rule maps")
		})
	}
}
