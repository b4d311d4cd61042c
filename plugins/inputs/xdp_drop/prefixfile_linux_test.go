//go:build linux

package xdp_drop

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// The two versions of a blocklist in the live tests: both list the
// sources of the UDP flood; only the first the 198.51.100.0/24 and only the
// second the TCP flood's 203.0.113.0/24 and 2001:db8:c::/48.
var (
	listV1 = []string{"# v1", "192.0.2.0/24 ; SBL1", "2001:db8:a::/48", "198.51.100.0/24"}
	listV2 = []string{"# v2", "192.0.2.0/24 ; SBL1", "2001:db8:a::/48", "203.0.113.0/24", "2001:db8:c::/48"}
	// Sources in both versions (UDP) and only in the second (TCP).
	bothV4 = ipFrame("192.0.2.7", "10.0.0.1", frames.ProtoUDP, 1, 2)
	bothV6 = ipFrame("2001:db8:a::7", "2001:db8:ffff::1", frames.ProtoUDP, 1, 2)
	newV4  = ipFrame("203.0.113.9", "10.0.0.1", frames.ProtoTCP, 1, 2)
	newV6  = ipFrame("2001:db8:c::9", "2001:db8:ffff::1", frames.ProtoTCP, 1, 2)
)

// classPackets is the packets of every xdp_drop point by family, protocol
// and action, and of the rule's points.
func classPackets(acc *testutil.Accumulator) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range acc.GetTelegrafMetrics() {
		v, _ := m.GetField("packets")
		switch m.Name() {
		case MeasurementCounters:
			out[m.Tags()["family"]+"/"+m.Tags()["protocol"]+"/"+m.Tags()["action"]] += v.(uint64)
		case MeasurementRule:
			out["rule/"+m.Tags()["rule"]] += v.(uint64)
		}
	}
	return out
}

func rulePoint(t *testing.T, acc *testutil.Accumulator, rule string) map[string]any {
	t.Helper()
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementRule && m.Tags()["rule"] == rule {
			return m.Fields()
		}
	}
	t.Fatalf("no xdp_drop_rule point for %q", rule)
	return nil
}

// TestPrefixFileSwapLive floods an interface from sources listed in both
// versions of a blocklist (UDP) and from sources listed only in the second
// (TCP) while the file flips between them 20 times, a gather putting each
// version in force: no frame from a source of both versions ever passes.
// Once the second version is in force, none of its new sources passes
// either, and the rule's counters went on through every swap.
func TestPrefixFileSwapLive(t *testing.T) {
	ns := testns.New(t)
	list := filepath.Join(t.TempDir(), "drop.txt")
	writeList(t, list, listV1...)
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: []Rule{
		{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}},
	}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	firstID := p.links.ifaces[0].prog.ID()

	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	flood := txgen.NewStream(1, func() (int, error) {
		n := 0
		err := ns.Do(func() error {
			for _, f := range [][]byte{bothV4, bothV6, newV4, newV6} {
				if err := gen.Send(ns.PeerIdx, f, 64); err != nil {
					return err
				}
				n += 64
			}
			return nil
		})
		return n, err
	})
	defer flood.Stop() // before gen closes, also when the test fails
	// Every swap is made while the flood runs: the flood has sent more
	// since the last one.
	floodOn := func(since int64) {
		t.Helper()
		require.NoError(t, flood.WaitSent(since+1, testns.Hang), "the flood runs")
	}
	swaps := 0
	for i := range 20 {
		floodOn(flood.Sent())
		version := listV2
		if i%2 == 1 {
			version = listV1
		}
		writeList(t, list, version...)
		before := p.files.gen
		acc := &testutil.Accumulator{}
		inNS(t, ns, p, func() error { return p.Gather(acc) })
		require.Empty(t, acc.Errors, "swap %d", i)
		require.Equal(t, before+1, p.files.gen, "swap %d: a new set", i)
		require.Equal(t, p.files.gen, p.links.ifaces[0].rulesGen, "swap %d: in force on the interface", i)
		swaps++
	}
	floodOn(flood.Sent())
	require.NoError(t, flood.Stop())
	sent := uint64(flood.Sent())
	require.Equal(t, 20, swaps)
	require.NotEqual(t, firstID, p.links.ifaces[0].prog.ID(), "the program was replaced")

	acc = gatherUntil(t, ns, p, sent)
	got := classPackets(acc)
	t.Logf("flood of %d frames through 20 swaps: %v", sent, got)
	require.Zero(t, got["ipv4/udp/pass"]+got["ipv6/udp/pass"], "frames from sources both versions list passed")
	both := got["ipv4/udp/drop"] + got["ipv6/udp/drop"]
	require.Equal(t, sent/2, both, "every frame of the sources both versions list dropped")
	require.Equal(t, got["ipv4/udp/drop"]+got["ipv6/udp/drop"]+got["ipv4/tcp/drop"]+got["ipv6/tcp/drop"], got["rule/blocklist"],
		"the rule counted every frame it dropped, across all programs")
	require.Equal(t, sent, got["ipv4/udp/drop"]+got["ipv6/udp/drop"]+got["ipv4/tcp/drop"]+got["ipv6/tcp/drop"]+got["ipv4/tcp/pass"]+got["ipv6/tcp/pass"])

	// The last version in force is the first (20 flips end on it): put the
	// second in force and flood from its new sources alone: none passes.
	writeList(t, list, listV2...)
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	total := sent
	send(t, ns, nil)
	require.NoError(t, ns.Do(func() error {
		for _, f := range [][]byte{newV4, newV6} {
			if err := gen.Send(ns.PeerIdx, f, 1000); err != nil {
				return err
			}
		}
		return nil
	}))
	acc = gatherUntil(t, ns, p, total+2000)
	after := classPackets(acc)
	require.Equal(t, got["ipv4/tcp/pass"], after["ipv4/tcp/pass"], "no frame from a new source passed after the swap")
	require.Equal(t, got["ipv6/tcp/pass"], after["ipv6/tcp/pass"], "no frame from a new source passed after the swap")
	require.Equal(t, got["ipv4/tcp/drop"]+1000, after["ipv4/tcp/drop"])
	require.Equal(t, got["ipv6/tcp/drop"]+1000, after["ipv6/tcp/drop"])
	fields := rulePoint(t, acc, "blocklist")
	require.Equal(t, int64(4), fields["prefixes"])
	require.NotContains(t, fields, "error")
}

// TestPrefixFileTrust reads prefix files under the config's trust rules
// when the binary runs with raised capabilities: a list others may write
// is refused, at start and later (the set in force stays).
func TestPrefixFileTrust(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	list := filepath.Join(dir, "drop.txt")
	writeList(t, list, "203.0.113.0/24")
	require.NoError(t, os.Chmod(list, 0o666))
	p := fileRulePlugin(Rule{Name: "list", Action: "drop", SrcPrefixFile: []string{list}})
	p.TrustPrefixFiles(os.Getuid())
	require.EqualError(t, p.Init(), `rule "list": src_prefix_file: `+list+` is writable by its group and all users (mode 0666), who could then choose which traffic is dropped; run: chmod go-w `+list)

	require.NoError(t, os.Chmod(list, 0o644))
	require.NoError(t, p.Init())
	writeList(t, list, "198.51.100.0/24")
	require.NoError(t, os.Chmod(list, 0o664))
	acc := &testutil.Accumulator{}
	p.links.refreshPrefixFiles(acc)
	p.files.releaseMemory()
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], "is writable by its group (mode 0664)")
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, p.links.policy.Rules[0].SrcPrefixes, "the set in force stays")
}

// TestPrefixFileTrustDirectory: a list refused for its directory, which
// others may write, is read again every gather, so that fixing the
// directory puts the list in force and clears the error.
func TestPrefixFileTrustDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	list := filepath.Join(dir, "drop.txt")
	writeList(t, list, "203.0.113.0/24")
	p := fileRulePlugin(Rule{Name: "list", Action: "drop", SrcPrefixFile: []string{list}})
	p.TrustPrefixFiles(os.Getuid())
	require.NoError(t, p.Init())
	refresh := func() *testutil.Accumulator {
		acc := &testutil.Accumulator{}
		p.links.refreshPrefixFiles(acc)
		p.files.releaseMemory()
		return acc
	}

	writeList(t, list, "198.51.100.0/24")
	require.NoError(t, os.Chmod(dir, 0o775))
	acc := refresh()
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], dir+" is writable by its group")
	errText := p.files.Fields(0, p.files.gen, nil).err
	require.Contains(t, errText, dir+" is writable by its group")
	require.Empty(t, refresh().Errors, "reported once")

	require.NoError(t, os.Chmod(dir, 0o755))
	require.Empty(t, refresh().Errors)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, p.links.policy.Rules[0].SrcPrefixes, "the list is in force")
	errText = p.files.Fields(0, p.files.gen, nil).err
	require.Empty(t, errText)
}

// TestPrefixFileHandover: a successor that takes over a handed-over
// program with its counters (the same rules and files) puts in force what
// the files hold at its start, not what they held when the program was
// loaded; the counters continue.
func TestPrefixFileHandover(t *testing.T) {
	ns := testns.New(t)
	list := filepath.Join(t.TempDir(), "drop.txt")
	writeList(t, list, listV1...)
	rules := []Rule{{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}}}
	a := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: rules, Log: testutil.Logger{}})
	startPlugin(t, ns, a)
	send(t, ns, []traffic.Flow{{Name: "both", Frame: bothV4, Count: 5, Class: bpf.IPv4Class(frames.ProtoUDP)}})
	gatherUntil(t, ns, a, 5)

	// a stops: a holder in this process keeps its link for the successor.
	prog := a.links.ifaces[0].prog
	fds, err := prog.Handed()
	require.NoError(t, err)
	require.Len(t, fds, 4, "with rule counters")
	var netns uint64
	require.NoError(t, ns.Do(func() (err error) { netns, err = handover.CurrentNetNS(); return err }))
	dir := hold(t, []handover.Offer{{
		Header: handover.Header{Key: handover.Key{NetNS: netns, Ifindex: ns.DevIdx}, Interface: testns.Dev,
			Mode: string(prog.Mode()), Fingerprint: prog.Fingerprint(), ProgramID: uint32(prog.ID())},
		FDs: dupAll(t, fds...),
	}})
	handedID := prog.ID()
	a.HandoverTimeout = 0
	inNS(t, ns, a, func() error { a.Stop(); return nil })

	// The list changes between the two instances.
	writeList(t, list, listV2...)
	log := &testutil.CaptureLogger{}
	b := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Rules: rules, Log: log})
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
	require.Contains(t, strings.Join(infos, "\n"), "counters continue", "the handed-over program was taken over with its counters")
	require.NotEqual(t, handedID, b.links.ifaces[0].prog.ID(), "the files' new set swapped in")

	for _, c := range []struct {
		frame []byte
		want  uint32
	}{{newV4, 1}, {newV6, 1}, {bothV4, 1}, {ipFrame("198.51.100.9", "10.0.0.1", frames.ProtoUDP, 1, 2), 2}} {
		verdict, err := b.links.ifaces[0].prog.XDP().Run(&ebpf.RunOptions{Data: c.frame})
		require.NoError(t, err)
		require.Equal(t, c.want, verdict, "XDP_DROP (1) for the second list's sources, XDP_PASS (2) for the first's alone")
	}
	got := classPackets(gatherUntil(t, ns, b, 5+4))
	require.Equal(t, uint64(5+3), got["rule/blocklist"], "the rule's counters continued")
}

// TestPrefixFileSwapInterfaces swaps a changed list into the programs of
// several interfaces, loaded side by side on one set of rule maps: each
// then decides by the new list and keeps its own counters.
func TestPrefixFileSwapInterfaces(t *testing.T) {
	ns := testns.New(t)
	names := []string{testns.Dev}
	for i := range 3 {
		name := fmt.Sprintf("xdpm%d", i)
		_, _, err := ns.AddVeth(name, name+"p")
		require.NoError(t, err)
		names = append(names, name)
	}
	list := filepath.Join(t.TempDir(), "drop.txt")
	writeList(t, list, listV1...)
	p := withDefaults(&XDPDrop{Interfaces: names, Rules: []Rule{
		{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}},
	}, Log: testutil.Logger{}})
	require.Empty(t, startPlugin(t, ns, p).Errors)
	before := map[string]ebpf.ProgramID{}
	for _, ifc := range p.links.ifaces {
		before[ifc.name] = ifc.prog.ID()
	}

	writeList(t, list, listV2...)
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	for i, ifc := range p.links.ifaces {
		require.NotEqual(t, before[ifc.name], ifc.prog.ID(), "%s: swapped", ifc.name)
		require.Equal(t, p.files.gen, ifc.rulesGen)
		for range i + 1 {
			verdict, err := ifc.prog.XDP().Run(&ebpf.RunOptions{Data: newV4})
			require.NoError(t, err)
			require.Equal(t, uint32(1), verdict, "%s: the new list's source dropped", ifc.name)
		}
	}
	// One set of rule maps in the kernel: the maps every program uses.
	common := map[ebpf.MapID]int{}
	for _, ifc := range p.links.ifaces {
		info, err := ifc.prog.XDP().Info()
		require.NoError(t, err)
		ids, ok := info.MapIDs()
		require.True(t, ok)
		for _, id := range ids {
			common[id]++
		}
	}
	shared := 0
	for _, n := range common {
		if n == len(p.links.ifaces) {
			shared++
		}
	}
	require.GreaterOrEqual(t, shared, 2, "rule maps shared by every interface's program")

	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	for i, name := range names {
		var got uint64
		for _, m := range acc.GetTelegrafMetrics() {
			if m.Name() == MeasurementRule && m.Tags()["interface"] == name {
				v, _ := m.GetField("packets")
				got = v.(uint64)
			}
		}
		require.Equal(t, uint64(i+1), got, "%s: its own rule counters", name)
	}
}
