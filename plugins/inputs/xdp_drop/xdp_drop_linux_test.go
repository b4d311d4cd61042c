//go:build linux

package xdp_drop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// inNS runs f inside the test namespace, after checking that every
// configured interface that exists there is a test veth, so the plugin can
// attach nowhere else.
func inNS(t *testing.T, ns *testns.NS, p *XDPDrop, f func() error) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		for _, name := range p.Interfaces {
			if _, err := ns.Netlink().LinkByName(name); err != nil {
				continue // absent: nothing can be attached
			}
			if err := ns.CheckAttachable(name); err != nil {
				return err
			}
		}
		return f()
	}))
}

// startPlugin initialises p and starts it inside the namespace; it is stopped
// when the test ends. It returns the accumulator Start reported to.
func startPlugin(t *testing.T, ns *testns.NS, p *XDPDrop) *testutil.Accumulator {
	t.Helper()
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, p, func() error { p.Stop(); return nil }) })
	return acc
}

func send(t *testing.T, ns *testns.NS, flows []traffic.Flow) {
	t.Helper()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.SendFlows(ns.PeerIdx, flows) }))
}

// expectedMetrics builds the xdp_drop points a mix must produce on iface.
func expectedMetrics(iface string, flows []traffic.Flow, action func(bpf.Class) string) []telegraf.Metric {
	want := traffic.Expected(flows)
	var out []telegraf.Metric
	for i, c := range want {
		if c.Packets == 0 {
			continue
		}
		class := bpf.Class(i)
		out = append(out, testutil.MustMetric("xdp_drop",
			map[string]string{"interface": iface, "family": class.Family().String(), "protocol": classProtocol(class), "action": action(class)},
			map[string]any{"packets": c.Packets, "bytes": c.Bytes}, time.Unix(0, 0)))
	}
	return out
}

func linkMetric(iface, mode string, id uint32) telegraf.Metric {
	return testutil.MustMetric("xdp_drop_link",
		map[string]string{"interface": iface, "mode": mode},
		map[string]any{"attached": true, "program_id": int64(id), "fallback": false}, time.Unix(0, 0))
}

// gatherUntil gathers until the xdp_drop points count want packets in all.
func gatherUntil(t *testing.T, ns *testns.NS, p *XDPDrop, want uint64) *testutil.Accumulator {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for {
		acc := &testutil.Accumulator{}
		inNS(t, ns, p, func() error { return p.Gather(acc) })
		var total uint64
		for _, m := range acc.GetTelegrafMetrics() {
			if m.Name() == "xdp_drop" {
				v, _ := m.GetField("packets")
				total += v.(uint64)
			}
		}
		if total >= want || time.Now().After(deadline) {
			return withTraffic(acc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// withTraffic drops the xdp_drop points at zero from acc: the standing
// series and the zeros before a new series (series_linux_test.go tests
// those), so that a test compares the classes its traffic reached.
func withTraffic(acc *testutil.Accumulator) *testutil.Accumulator {
	out := &testutil.Accumulator{Errors: acc.Errors}
	for _, m := range acc.GetTelegrafMetrics() {
		if p, _ := m.GetField(FieldPackets); m.Name() == MeasurementCounters && p == uint64(0) {
			continue
		}
		out.AddMetric(m)
	}
	return out
}

func TestGatherRealAttachment(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry_run=%v", dry), func(t *testing.T) {
			ns := testns.New(t)
			p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"udp", "icmp", int64(47)}, DryRun: dry, Log: testutil.Logger{}})
			acc := startPlugin(t, ns, p)
			require.Empty(t, acc.Errors)

			mix := traffic.Mix()
			send(t, ns, mix)
			acc = gatherUntil(t, ns, p, uint64(traffic.Total(mix)))
			require.Empty(t, acc.Errors)

			id, err := ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			require.NotZero(t, id)
			want := expectedMetrics(testns.Dev, mix, func(c bpf.Class) string {
				proto, ok := c.Protocol()
				if ok && (proto == 17 || proto == 1 || proto == 47) {
					if dry {
						return "would_drop"
					}
					return "drop"
				}
				return "pass"
			})
			want = append(want, linkMetric(testns.Dev, "native", id))
			testutil.RequireMetricsEqual(t, want, acc.GetTelegrafMetrics(), testutil.IgnoreTime(), testutil.SortMetrics())
		})
	}
}

// TestInterfaceAppearsLater configures an interface that does not exist yet:
// it is reported, the other interface keeps working, and it is attached at
// the first gather after it appears.
func TestInterfaceAppearsLater(t *testing.T) {
	ns := testns.New(t)
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpt2", testns.Dev}, Drop: []any{"all"}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Len(t, acc.Errors, 1)
	require.Contains(t, acc.Errors[0].Error(), `interface "xdpt2" not found`)
	require.Contains(t, acc.Errors[0].Error(), testns.Dev, "the error lists the interfaces that exist")

	for i := 0; i < 3; i++ {
		if i == 1 {
			// Other interfaces coming and going change the error's list of
			// interfaces; it is still the same error.
			_, _, err := ns.AddVeth("xdpt4", "xdpt5")
			require.NoError(t, err)
		}
		acc = &testutil.Accumulator{}
		inNS(t, ns, p, func() error { return p.Gather(acc) })
		require.Empty(t, acc.Errors, "a missing interface is reported once, not at every gather")
		m, ok := acc.Get("xdp_drop_link")
		require.True(t, ok)
		require.Equal(t, "xdpt2", m.Tags["interface"])
		require.Equal(t, false, m.Fields["attached"])
		require.Contains(t, m.Fields["error"], "not found")
		require.True(t, acc.HasTag("xdp_drop_link", "interface"))
	}
	require.True(t, attachedIn(acc, testns.Dev))

	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	require.True(t, attachedIn(acc, "xdpt2"))
	require.True(t, attachedIn(acc, testns.Dev))
	id, err := ns.XDPProgramID("xdpt2")
	require.NoError(t, err)
	require.NotZero(t, id)

	inNS(t, ns, p, func() error { p.Stop(); return nil })
	for _, name := range []string{"xdpt2", testns.Dev} {
		id, err := ns.XDPProgramID(name)
		require.NoError(t, err)
		require.Zero(t, id, "Stop detaches %s", name)
	}
}

func attachedIn(acc *testutil.Accumulator, iface string) bool {
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() != "xdp_drop_link" {
			continue
		}
		if v, _ := m.GetTag("interface"); v == iface {
			a, _ := m.GetField("attached")
			return a == true
		}
	}
	return false
}

// TestRefusesForeignProgram: an XDP program that is not ours is left alone
// and named; replace = true replaces it.
func TestRefusesForeignProgram(t *testing.T) {
	ns := testns.New(t)
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "foreign", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()},
	})
	require.NoError(t, err)
	defer other.Close()
	var l link.Link
	require.NoError(t, ns.Do(func() error {
		if err := ns.CheckAttachable(testns.Dev); err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: other, Interface: ns.DevIdx})
		return err
	}))
	defer l.Close()
	otherID := programID(t, other)

	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	require.Len(t, acc.Errors, 1)
	msg := acc.Errors[0].Error()
	require.Contains(t, msg, fmt.Sprintf("XDP program id %d (foreign)", otherID))
	require.Contains(t, msg, "not ours")
	require.Contains(t, msg, "replace = true")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(otherID), id, "the other program stays")
	inNS(t, ns, p, func() error { p.Stop(); return nil })

	p = withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Replace: true, Log: testutil.Logger{}})
	acc = startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	id, err = ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotEqual(t, uint32(otherID), id)
	require.Equal(t, uint32(p.links.ifaces[0].prog.ID()), id)
}

func programID(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	info, err := p.Info()
	require.NoError(t, err)
	id, ok := info.ID()
	require.True(t, ok)
	return id
}

// TestRecognisesOwnProgram: an xdp_drop program this instance did not attach
// (another instance, or one left attached through netlink) is named as ours
// and left alone.
func TestRecognisesOwnProgram(t *testing.T) {
	ns := testns.New(t)
	stale, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer stale.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return stale.Attach(ns.DevIdx, bpf.ModeNative) }))

	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Len(t, acc.Errors, 1)
	msg := acc.Errors[0].Error()
	require.Contains(t, msg, fmt.Sprintf("XDP program id %d (xdp_drop)", stale.ID()))
	require.Contains(t, msg, "an xdp_drop program that another running instance owns")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(stale.ID()), id)
}

// TestNativeUnsupported uses a device without native XDP: mode native fails
// with advice, auto falls back to generic and says so in the mode tag.
func TestNativeUnsupported(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.AddBridge("xdpbr0"))

	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpbr0"}, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	require.Len(t, acc.Errors, 1)
	require.Contains(t, acc.Errors[0].Error(), `mode = "generic"`)
	require.Contains(t, acc.Errors[0].Error(), `mode = "auto"`)
	id, err := ns.XDPProgramID("xdpbr0")
	require.NoError(t, err)
	require.Zero(t, id, "nothing attached after a failed attach")

	log := &captureLog{}
	p = withDefaults(&XDPDrop{Interfaces: []string{"xdpbr0"}, Mode: "auto", Drop: []any{"all"}, Log: log})
	acc = startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	m, ok := acc.Get("xdp_drop_link")
	require.True(t, ok)
	require.Equal(t, "generic", m.Tags["mode"])
	require.Equal(t, true, m.Fields["attached"])
	require.Equal(t, true, m.Fields["fallback"])
	require.Contains(t, strings.Join(log.warnings, "\n"), `mode = "auto" fell back to generic mode (slower): native XDP refused: driver does not support native XDP`)
}

type captureLog struct {
	testutil.Logger
	warnings []string
	infos    []string
}

func (l *captureLog) Infof(format string, args ...any) {
	l.infos = append(l.infos, fmt.Sprintf(format, args...))
}

func (l *captureLog) Warnf(format string, args ...any) {
	l.warnings = append(l.warnings, fmt.Sprintf(format, args...))
}
