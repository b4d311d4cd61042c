//go:build linux

package xdp_drop

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// jumboNS is a test namespace whose veth pair runs at MTU 9000.
func jumboNS(t *testing.T) *testns.NS {
	ns := testns.New(t)
	for _, dev := range []string{testns.Dev, testns.Peer} {
		require.NoError(t, ns.SetMTU(dev, 9000))
	}
	return ns
}

// jumboFrames are UDP (dropped by drop = ["udp"]) and TCP (passed) frames of
// 1500, 4000, 8000 and 9014 bytes, 9014 being the largest MTU 9000 allows,
// each after a small frame, and how many bytes of each class they make.
func jumboFrames() (out [][]byte, udp, tcp bpf.Counter) {
	for i, size := range []int{1500, 4000, 8000, 9014} {
		u := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(size-14-20-8)))
		tc := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(size-14-20-20)))
		small := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
		for n := 0; n < i+1; n++ {
			out = append(out, small, u, tc)
			udp.Packets += 2
			udp.Bytes += uint64(len(small) + len(u))
			tcp.Packets++
			tcp.Bytes += uint64(len(tc))
		}
	}
	return out, udp, tcp
}

// lineProtocol renders the gathered points, sorted, for the test log.
func lineProtocol(ms []telegraf.Metric) string {
	var lines []string
	for _, m := range ms {
		var tags, fields []string
		for _, tag := range m.TagList() {
			tags = append(tags, tag.Key+"="+tag.Value)
		}
		for _, f := range m.FieldList() {
			switch v := f.Value.(type) {
			case string:
				fields = append(fields, fmt.Sprintf("%s=%q", f.Key, v))
			case bool:
				fields = append(fields, fmt.Sprintf("%s=%v", f.Key, v))
			default:
				fields = append(fields, fmt.Sprintf("%s=%vi", f.Key, v))
			}
		}
		lines = append(lines, m.Name()+","+strings.Join(tags, ",")+" "+strings.Join(fields, ","))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestJumboNativeMetrics: at MTU 9000 the plugin attaches natively with the
// multi-buffer program and reports frames of 1500 to 9014 bytes, mixed
// with small ones, in packets and whole-frame bytes; fallback is false.
func TestJumboNativeMetrics(t *testing.T) {
	ns := jumboNS(t)
	log := &captureLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"udp"}, Log: log})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	require.Contains(t, strings.Join(log.infos, "\n"), "multi-buffer: the device's MTU needs more than one buffer per frame")

	out, udp, tcp := jumboFrames()
	require.NoError(t, ns.SendRaw(testns.Peer, out))
	acc = gatherUntil(t, ns, p, udp.Packets+tcp.Packets)
	require.Empty(t, acc.Errors)
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	want := []telegraf.Metric{
		testutil.MustMetric("xdp_drop", map[string]string{"interface": testns.Dev, "family": "ipv4", "protocol": "udp", "action": "drop"},
			map[string]any{"packets": udp.Packets, "bytes": udp.Bytes}, time.Unix(0, 0)),
		testutil.MustMetric("xdp_drop", map[string]string{"interface": testns.Dev, "family": "ipv4", "protocol": "tcp", "action": "pass"},
			map[string]any{"packets": tcp.Packets, "bytes": tcp.Bytes}, time.Unix(0, 0)),
		linkMetric(testns.Dev, "native", id),
	}
	testutil.RequireMetricsEqual(t, want, acc.GetTelegrafMetrics(), testutil.IgnoreTime(), testutil.SortMetrics())
	t.Logf("gathered at MTU 9000:\n%s", lineProtocol(acc.GetTelegrafMetrics()))
}

// TestKeepAttachedJumbo: a link kept at MTU 9000 holds the multi-buffer
// program; the next run's single-buffer program would be refused there, so
// the takeover puts its multi-buffer program into the same link, and the
// pinned counters go on.
func TestKeepAttachedJumbo(t *testing.T) {
	ns := jumboNS(t)
	dir := pinDir(t)
	kept := func(log telegraf.Logger) *XDPDrop {
		return withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"udp"}, PinPath: dir, KeepAttached: true, Log: log})
	}
	out, udp, tcp := jumboFrames()
	total := udp.Packets + tcp.Packets

	first := kept(testutil.Logger{})
	acc := startPlugin(t, ns, first)
	require.Empty(t, acc.Errors)
	inNS(t, ns, first, func() error { first.Stop(); return nil })
	id1, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id1, "still attached after Stop")
	link1 := keptLinkID(t, dir)
	require.NoError(t, ns.SendRaw(testns.Peer, out), "while no agent runs: still counted")

	log := &captureLog{}
	second := kept(log)
	acc = startPlugin(t, ns, second)
	require.Empty(t, acc.Errors)
	require.Contains(t, strings.Join(log.infos, "\n"), "took over the attachment kept by an earlier run")
	require.Contains(t, strings.Join(log.infos, "\n"), "multi-buffer")
	require.Equal(t, link1, keptLinkID(t, dir), "the same link, updated in place")
	id2, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotEqual(t, id1, id2)

	require.NoError(t, ns.SendRaw(testns.Peer, out))
	acc = gatherUntil(t, ns, second, 2*total)
	require.Equal(t, 2*total, packetsOf(acc, testns.Dev))
	var bytes uint64
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == "xdp_drop" {
			v, _ := m.GetField("bytes")
			bytes += v.(uint64)
		}
	}
	require.Equal(t, 2*(udp.Bytes+tcp.Bytes), bytes, "whole frames, before and after the takeover")
	inNS(t, ns, second, func() error { second.Stop(); return nil })
	// keep_attached off releases the kept link; its Stop detaches.
	released := kept(testutil.Logger{})
	released.KeepAttached = false
	startPlugin(t, ns, released)
}
