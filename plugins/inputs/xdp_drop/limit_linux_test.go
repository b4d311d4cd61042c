//go:build linux

package xdp_drop

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// TestLimitRuleLive sends a burst through a veth into the plugin's program
// with a per-source DNS limit of 1 frame/s and burst 5: each of two sources
// gets its 5 frames through and the rest dropped (would_drop in a dry run),
// and the rule's pass and drop points and the classes count them exactly.
func TestLimitRuleLive(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry_run=%v", dry), func(t *testing.T) {
			ns := testns.New(t)
			rules := []Rule{{Name: "dns-per-source", Action: "limit", Protocol: []any{"udp"}, DstPort: []any{int64(53)},
				Rate: int64(1), Burst: int64(5), Per: "source"}}
			p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"tcp"}, Rules: rules, DryRun: dry, Log: testutil.Logger{}})
			acc := startPlugin(t, ns, p)
			require.Empty(t, acc.Errors)

			a := ipFrame("203.0.113.5", "198.51.100.53", frames.ProtoUDP, 40000, 53)
			b := ipFrame("2001:db8:2::5", "2001:db8:9::53", frames.ProtoUDP, 40000, 53)
			send(t, ns, []traffic.Flow{{Name: "a", Frame: a, Count: 12}, {Name: "b", Frame: b, Count: 9}})
			acc = gatherUntil(t, ns, p, 21)
			require.Empty(t, acc.Errors)

			over := "drop"
			if dry {
				over = "would_drop"
			}
			point := func(name string, tags map[string]string, n, size int) telegraf.Metric {
				tags["interface"] = testns.Dev
				return testutil.MustMetric(name, tags, map[string]any{"packets": uint64(n), "bytes": uint64(n * size)}, time.Unix(0, 0))
			}
			id, err := ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			want := []telegraf.Metric{
				point("xdp_drop", map[string]string{"family": "ipv4", "protocol": "udp", "action": "pass"}, 5, len(a)),
				point("xdp_drop", map[string]string{"family": "ipv4", "protocol": "udp", "action": over}, 7, len(a)),
				point("xdp_drop", map[string]string{"family": "ipv6", "protocol": "udp", "action": "pass"}, 5, len(b)),
				point("xdp_drop", map[string]string{"family": "ipv6", "protocol": "udp", "action": over}, 4, len(b)),
				testutil.MustMetric("xdp_drop_rule", map[string]string{"interface": testns.Dev, "rule": "dns-per-source", "action": "pass"},
					map[string]any{"packets": uint64(10), "bytes": uint64(5*len(a) + 5*len(b))}, time.Unix(0, 0)),
				testutil.MustMetric("xdp_drop_rule", map[string]string{"interface": testns.Dev, "rule": "dns-per-source", "action": over},
					map[string]any{"packets": uint64(11), "bytes": uint64(7*len(a) + 4*len(b))}, time.Unix(0, 0)),
				linkMetric(testns.Dev, "native", id),
			}
			testutil.RequireMetricsEqual(t, want, acc.GetTelegrafMetrics(), testutil.IgnoreTime(), testutil.SortMetrics())
			require.NotNil(t, p.links.policy.Rules[0].Limit)
			require.Equal(t, uint64(1), p.links.policy.Rules[0].Limit.Rate)
		})
	}
}

// TestLimitRulePrefixFileSwapKeepsBudget spends the budget of a per-rule
// limit (1 frame/s, burst 5) whose sources come from a prefix file, then
// changes the file: the swap puts the new prefixes in force on the budget
// spent, so the frames after it pass only as the rate refilled it.
func TestLimitRulePrefixFileSwapKeepsBudget(t *testing.T) {
	ns := testns.New(t)
	list := filepath.Join(t.TempDir(), "limited.txt")
	writeList(t, list, "192.0.2.0/24")
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: []Rule{{Name: "limited", Action: "limit",
		SrcPrefixFile: []string{list}, Rate: int64(1), Burst: int64(5), Per: "rule"}}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)

	a := ipFrame("192.0.2.7", "10.0.0.1", frames.ProtoUDP, 40000, 53)
	spent := time.Now()
	send(t, ns, []traffic.Flow{{Name: "a", Frame: a, Count: 12}})
	acc = gatherUntil(t, ns, p, 12)
	require.Empty(t, acc.Errors)
	pass, drop := limitPackets(t, acc, "limited")
	require.Equal(t, [2]uint64{5, 7}, [2]uint64{pass, drop}, "pass, drop before the swap")

	writeList(t, list, "192.0.2.0/24", "198.51.100.0/24")
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	require.Equal(t, p.files.gen, p.links.ifaces[0].rulesGen, "the changed file is in force")

	send(t, ns, []traffic.Flow{{Name: "a", Frame: a, Count: 12}})
	acc = gatherUntil(t, ns, p, 24)
	elapsed := time.Since(spent)
	require.Empty(t, acc.Errors)
	pass2, drop2 := limitPackets(t, acc, "limited")
	require.Equal(t, uint64(24), pass2+drop2)
	refilled := uint64(elapsed/time.Second) + 1
	require.LessOrEqual(t, pass2-5, refilled, "passed after the swap in %v: the budget spent before it stays spent", elapsed)
}

// limitPackets is the packets of a limit rule's pass and drop points, over
// all interfaces.
func limitPackets(t *testing.T, acc *testutil.Accumulator, rule string) (pass, drop uint64) {
	t.Helper()
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() != MeasurementRule || m.Tags()["rule"] != rule {
			continue
		}
		v, _ := m.GetField("packets")
		switch m.Tags()["action"] {
		case "pass":
			pass += v.(uint64)
		case "drop":
			drop += v.(uint64)
		}
	}
	return pass, drop
}

// TestLimitRuleFileFields: both points of a limit rule with prefix files,
// pass and drop, carry the file fields, the error too while a file fails.
func TestLimitRuleFileFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limited.txt")
	writeList(t, path, "192.0.2.0/24", "2001:db8:a::/48")
	p := fileRulePlugin(Rule{Name: "limited", Action: "limit", SrcPrefixFile: []string{path}, Rate: int64(10)})
	require.NoError(t, p.Init())
	var rules, limited [bpf.MaxRules]bpf.Counter
	rules[0], limited[0] = bpf.Counter{Packets: 9, Bytes: 900}, bpf.Counter{Packets: 4, Bytes: 400}
	loaded := p.files.rules[0].cur().loaded.Unix()
	series := func(errText string) []RuleSeries {
		return []RuleSeries{
			{Interface: "eth1", Rule: "limited", Action: "pass", Packets: 5, Bytes: 500, Files: true, Prefixes: 2, Loaded: loaded, Error: errText},
			{Interface: "eth1", Rule: "limited", Action: "drop", Packets: 4, Bytes: 400, Files: true, Prefixes: 2, Loaded: loaded, Error: errText},
		}
	}
	require.Equal(t, series(""), p.links.appendRules(nil, "eth1", p.files.gen, nil, &rules, &limited))

	writeList(t, path, "192.0.2.0/24", "198.51.100.1/24")
	acc := &testutil.Accumulator{}
	p.links.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Len(t, acc.Errors, 1)
	bad := "src_prefix_file: " + path + `:2: "198.51.100.1/24" has host bits set; did you mean "198.51.100.0/24"?`
	require.Equal(t, series(bad), p.links.appendRules(nil, "eth1", p.files.gen, nil, &rules, &limited))
}

// TestLimitBudgetSurvivesAttachInSwapGather spends a per-rule ceiling (1
// frame/s, burst 100) whose sources come from a prefix file, then, in the
// one gather that puts a changed file in force, an interface is attached
// too: one that appears under a glob, or one listed that is refused (a
// foreign program holds it) at every gather. The generation made for the
// attach goes on with the budget spent: of 200 frames more, only what the
// rate refilled passes, not another burst of 100.
func TestLimitBudgetSurvivesAttachInSwapGather(t *testing.T) {
	for _, trigger := range []string{"glob", "refused"} {
		t.Run(trigger, func(t *testing.T) {
			ns := testns.New(t)
			list := filepath.Join(t.TempDir(), "limited.txt")
			writeList(t, list, "192.0.2.0/24")
			interfaces := []string{testns.Dev, "xdpn*"}
			if trigger == "refused" {
				interfaces = []string{testns.Dev, "xdpr0"}
				_, _, err := ns.AddVeth("xdpr0", "xdpr1")
				require.NoError(t, err)
				attachForeign(t, ns, "xdpr0")
			}
			p := withDefaults(&XDPDrop{Interfaces: interfaces, Rules: []Rule{{Name: "ceiling", Action: "limit",
				SrcPrefixFile: []string{list}, Rate: int64(1), Burst: int64(100), Per: "rule"}}, Log: testutil.Logger{}})
			require.NoError(t, p.Init())
			acc := &testutil.Accumulator{}
			inNS(t, ns, p, func() error { return p.Start(acc) })
			t.Cleanup(func() { inNS(t, ns, p, func() error { p.Stop(); return nil }) })

			a := ipFrame("192.0.2.7", "10.0.0.1", frames.ProtoUDP, 40000, 53)
			spent := time.Now()
			send(t, ns, []traffic.Flow{{Name: "a", Frame: a, Count: 200}})
			acc = gatherUntil(t, ns, p, 200)
			pass, drop := limitPackets(t, acc, "ceiling")
			requireSpent(t, pass, drop, 100, 200, time.Since(spent))

			// One gather: the changed file and the interface to attach.
			writeList(t, list, "192.0.2.0/24", "198.51.100.0/24")
			if trigger == "glob" {
				_, _, err := ns.AddVeth("xdpn0", "xdpm0")
				require.NoError(t, err)
			}
			acc = &testutil.Accumulator{}
			inNS(t, ns, p, func() error { return p.Gather(acc) })
			require.Equal(t, p.files.gen, p.links.ifaces[0].rulesGen, "the changed file is in force")
			if trigger == "glob" {
				require.Empty(t, acc.Errors)
				require.True(t, attachedIn(acc, "xdpn0"), "the interface the glob found is attached")
			} else {
				require.False(t, attachedIn(acc, "xdpr0"), "the foreign program keeps its interface")
			}

			send(t, ns, []traffic.Flow{{Name: "a", Frame: a, Count: 200}})
			acc = gatherUntil(t, ns, p, 400)
			elapsed := time.Since(spent)
			pass2, drop2 := limitPackets(t, acc, "ceiling")
			require.Equal(t, uint64(400), pass2+drop2)
			refilled := uint64(elapsed/time.Second) + 1
			require.LessOrEqual(t, pass2-pass, refilled, "of 200 frames after the gather (%v after the ceiling was spent): the budget spent stays spent", elapsed)
		})
	}
}

// attachForeign attaches an XDP program that is not the plugin's to a
// veth of the test namespace, until the test ends.
func attachForeign(t *testing.T, ns *testns.NS, dev string) {
	t.Helper()
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "foreign", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	dl, err := ns.Netlink().LinkByName(dev)
	require.NoError(t, err)
	var l link.Link
	require.NoError(t, ns.Attach(dev, func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: other, Interface: dl.Attrs().Index})
		return err
	}))
	t.Cleanup(func() { l.Close() })
}

// requireSpent checks that of sent frames to a 1 frame/s budget with burst
// burst, the burst passed and, but for what the rate refilled while they
// were sent, no more: the budget is spent.
func requireSpent(t *testing.T, pass, drop, burst, sent uint64, took time.Duration) {
	t.Helper()
	require.Equal(t, sent, pass+drop, "every frame decided by the rule")
	require.GreaterOrEqual(t, pass, burst, "the burst passed")
	require.LessOrEqual(t, pass-burst, uint64(took/time.Second), "passed beyond the burst in %v", took)
}
