//go:build linux

package xdp_drop

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdp-drop/xdp_drop/internal/flowspec"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// routeServer is a Debian gobgpd the test runs on a loopback port of its
// own, AS 65000, waiting for the plugin (AS 65001) to connect.
type routeServer struct {
	t    *testing.T
	port uint16
	grpc string
	out  bytes.Buffer
}

func loopbackPort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func startRouteServer(t *testing.T) *routeServer {
	t.Helper()
	for _, bin := range []string{"gobgpd", "gobgp"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
				t.Fatalf("%s not installed (apt-get install gobgpd)", bin)
			}
			t.Skipf("%s not installed (apt-get install gobgpd)", bin)
		}
	}
	rs := &routeServer{t: t, port: loopbackPort(t), grpc: fmt.Sprintf("127.0.0.1:%d", loopbackPort(t))}
	conf := filepath.Join(t.TempDir(), "gobgpd.toml")
	var b strings.Builder
	fmt.Fprintf(&b, "[global.config]\n  as = 65000\n  router-id = \"10.255.0.1\"\n  port = %d\n  local-address-list = [\"127.0.0.1\"]\n", rs.port)
	b.WriteString("[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"127.0.0.1\"\n    peer-as = 65001\n")
	b.WriteString("  [neighbors.transport.config]\n    passive-mode = true\n  [neighbors.timers.config]\n    connect-retry = 1\n")
	for _, f := range []string{"ipv4-flowspec", "ipv6-flowspec"} {
		fmt.Fprintf(&b, "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = %q\n", f)
	}
	require.NoError(t, os.WriteFile(conf, []byte(b.String()), 0o600))
	cmd := testproc.Command("gobgpd", "-f", conf, "--api-hosts", rs.grpc, "-p", "--pprof-disable")
	cmd.Stdout, cmd.Stderr = &rs.out, &rs.out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(testns.Hang)
	for {
		if _, err := rs.cliErr("global"); err == nil {
			return rs
		}
		select {
		case <-exited:
			t.Fatalf("gobgpd exited at start:\n%s", rs.out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "gobgpd's API did not answer")
		time.Sleep(50 * time.Millisecond)
	}
}

func (rs *routeServer) cliErr(args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(rs.grpc)
	out, err := exec.Command("gobgp", append([]string{"-u", host, "-p", port}, args...)...).CombinedOutput()
	return string(out), err
}

// rib adds ("add") or withdraws ("del") an IPv4 FlowSpec rule.
func (rs *routeServer) rib(op string, rule ...string) {
	rs.t.Helper()
	args := append([]string{"global", "rib", "-a", "ipv4-flowspec", op}, rule...)
	out, err := rs.cliErr(args...)
	require.NoError(rs.t, err, "gobgp %s: %s", strings.Join(args, " "), out)
}

// flowPlugin attaches to the test veth, whose address is 10.9.0.1, and
// takes FlowSpec rules from rs; frames no rule drops pass.
func flowPlugin(t *testing.T, ns *testns.NS, rs *routeServer) *XDPDrop {
	t.Helper()
	hostAddr(t, ns)
	return flowConfig("127.0.0.1", rs.port)
}

// hostAddr gives the test veth the address 10.9.0.1/24, the rules'
// destination, and sets it up.
func hostAddr(t *testing.T, ns *testns.NS) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		link, err := ns.Netlink().LinkByName(testns.Dev)
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.9.0.1/24")
		if err := ns.Netlink().AddrAdd(link, addr); err != nil {
			return err
		}
		return ns.Netlink().LinkSetUp(link)
	}))
}

// flowConfig is the plugin of flowPlugin without touching the namespace:
// a successor's, or one whose peer is at address:port.
func flowConfig(address string, port uint16) *XDPDrop {
	p := int64(port)
	return withDefaults(&XDPDrop{
		Interfaces: []string{testns.Dev}, Log: testutil.Logger{},
		FlowSpec: &FlowSpecConfig{LocalAS: 65001, RouterID: "10.255.0.2", Peers: []FlowSpecPeer{{Address: address, Port: &p, PeerAS: 65000}}},
	})
}

// flowGather gathers once: the FlowSpec rule points by rule text, and the
// peer's point.
func flowGather(t *testing.T, ns *testns.NS, p *XDPDrop) (map[string]telegraf.Metric, telegraf.Metric) {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	rules := map[string]telegraf.Metric{}
	var peer telegraf.Metric
	for _, m := range acc.GetTelegrafMetrics() {
		switch m.Name() {
		case MeasurementFlowSpec:
			rules[m.Fields()[FieldRuleText].(string)] = m
		case MeasurementFlowSpecPeer:
			peer = m
		}
	}
	require.NotNil(t, peer, "the peer's point")
	return rules, peer
}

// waitFlow gathers until ok says so, up to testns.Hang.
func waitFlow(t *testing.T, ns *testns.NS, p *XDPDrop, what string, ok func(map[string]telegraf.Metric, telegraf.Metric) bool) (map[string]telegraf.Metric, telegraf.Metric) {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for {
		rules, peer := flowGather(t, ns, p)
		if ok(rules, peer) {
			return rules, peer
		}
		require.True(t, time.Now().Before(deadline), "%s: not within %v; peer %v", what, testns.Hang, peer)
		time.Sleep(50 * time.Millisecond)
	}
}

// udpFrame is a UDP frame of length bytes in all, from src:sport to
// dst:dport.
func udpFrame(src, dst string, sport, dport uint16, length int) []byte {
	l4 := frames.Ports(frames.UDP(length-14-20-8), sport, dport)
	return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, l4), netip.MustParseAddr(src), netip.MustParseAddr(dst)))
}

// flowFrames is a kind of frame of a mix (flowMix), with the count sent
// and how many must reach the stack.
type flowFrames struct {
	frame  []byte
	count  int
	passed int
}

// sendFlowFrames sends each kind through the veth's peer and checks what
// reached the stack behind the veth, kind by kind, exactly.
func sendFlowFrames(t *testing.T, ns *testns.NS, kinds ...flowFrames) {
	t.Helper()
	sock, err := ns.OpenPacketSocket(testns.Dev)
	require.NoError(t, err)
	defer sock.Close()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	passed := 0
	for _, k := range kinds {
		require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, k.frame, k.count) }))
		passed += k.passed
	}
	seen, err := sock.Receive(passed, testns.Hang)
	require.NoError(t, err)
	for i, k := range kinds {
		n := 0
		for _, s := range seen {
			if bytes.Equal(s, k.frame) {
				n++
			}
		}
		require.Equal(t, k.passed, n, "frames of kind %d (%d bytes) that reached the stack", i, len(k.frame))
	}
}

// flowMix is the done-test's mix from src: 37 NTP replies of 468 bytes
// (bigPassed of them to reach the stack), 23 of 90 bytes, 11 DNS frames
// of 468 bytes and 13 TCP frames, the rest to pass.
func flowMix(src string, bigPassed int) []flowFrames {
	return []flowFrames{
		{udpFrame(src, "10.9.0.1", 123, 40000, 468), 37, bigPassed},
		{udpFrame(src, "10.9.0.1", 123, 40000, 90), 23, 23},
		{udpFrame(src, "10.9.0.1", 53, 40000, 468), 11, 11},
		{ipFrame(src, "10.9.0.1", frames.ProtoTCP, 123, 40000), 13, 13},
	}
}

const ntpRuleText = "destination 10.9.0.1/32 protocol ==17 source-port ==123 packet-length >=400 then discard"

// TestFlowSpecNTPRule: the done-test at the receiving stack. The
// NTP rule announced by gobgpd drops exactly the 468-byte NTP frames of a
// mix and passes the rest (NTP of 90 bytes, DNS, TCP); its point counts
// them exactly; withdrawn, they pass. The times from announcement and
// withdrawal to enforcement are logged (the target is 1 s), not asserted.
func TestFlowSpecNTPRule(t *testing.T) {
	rs := startRouteServer(t)
	ns := testns.New(t)
	p := flowPlugin(t, ns, rs)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	_, peer := waitFlow(t, ns, p, "the session up", func(_ map[string]telegraf.Metric, peer telegraf.Metric) bool {
		return peer.Fields()[FieldUp] == true
	})
	require.Equal(t, "established", peer.Fields()[FieldState])
	require.Equal(t, "127.0.0.1", peer.Tags()[TagPeer])
	require.Equal(t, int64(-1), peer.Fields()[FieldLastUpdateS])

	mix := func(bigPassed int) []flowFrames { return flowMix("203.0.113.5", bigPassed) }
	require.Len(t, mix(0)[0].frame, 468)

	rule := strings.Fields("match destination 10.9.0.1/32 protocol udp source-port ==123 packet-length >=400 then discard")
	announced := time.Now()
	rs.rib("add", rule...)
	waitInForce(t, p, 1)
	t.Logf("announced to in force: %v (target 1 s)", time.Since(announced).Round(time.Millisecond))
	sendFlowFrames(t, ns, mix(0)...)

	rules, peer := flowGather(t, ns, p)
	require.Len(t, rules, 1, "one rule, one interface")
	m := rules[ntpRuleText]
	require.NotNil(t, m, "the rule's point by its canonical text: %v", rules)
	logLines(t, m, peer)
	require.Equal(t, map[string]string{TagInterface: testns.Dev, TagRule: m.Tags()[TagRule], TagAction: FlowActionDrop}, m.Tags())
	require.Len(t, m.Tags()[TagRule], 12)
	require.Equal(t, map[string]any{
		FieldRuleText: ntpRuleText, FieldPackets: uint64(37), FieldBytes: uint64(37 * 468),
		FieldDroppedPackets: uint64(37), FieldDroppedBytes: uint64(37 * 468),
	}, m.Fields())
	f := peer.Fields()
	require.Equal(t, int64(1), f[FieldReceived])
	require.Equal(t, int64(1), f[FieldAccepted])
	require.Equal(t, int64(0), f[FieldRefused])
	require.GreaterOrEqual(t, f[FieldLastUpdateS], int64(0))

	withdrawn := time.Now()
	rs.rib("del", rule[:len(rule)-2]...)
	waitInForce(t, p, 0)
	t.Logf("withdrawn to lifted: %v (target 1 s)", time.Since(withdrawn).Round(time.Millisecond))
	sendFlowFrames(t, ns, mix(37)...)

	// One last point for the rule withdrawn, with its counts; then none.
	rules, _ = flowGather(t, ns, p)
	require.Len(t, rules, 1)
	require.Equal(t, uint64(37), rules[ntpRuleText].Fields()[FieldPackets])
	rules, _ = flowGather(t, ns, p)
	require.Empty(t, rules)
}

// waitInForce waits until the FlowSpec table holds n rules, reading it
// every 10 ms.
func waitInForce(t *testing.T, p *XDPDrop, n int) {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for len(p.flow.table.inForce()) != n {
		require.True(t, time.Now().Before(deadline), "%d rules in force: not within %v", n, testns.Hang)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFlowSpecNotLocalRefused: the same rule for a destination that is
// not the host's is refused with only_local_destinations, counted on the
// peer's point, and drops nothing.
func TestFlowSpecNotLocalRefused(t *testing.T) {
	rs := startRouteServer(t)
	ns := testns.New(t)
	p := flowPlugin(t, ns, rs)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	rs.rib("add", strings.Fields("match destination 10.99.0.1/32 protocol udp source-port ==123 packet-length >=400 then discard")...)
	rules, peer := waitFlow(t, ns, p, "the rule refused", func(_ map[string]telegraf.Metric, peer telegraf.Metric) bool {
		return field(peer.Fields(), FieldRefusedPrefix+flowspec.ReasonOnlyLocal) == 1
	})
	logLines(t, peer)
	require.Empty(t, rules, "no rule in force")
	f := peer.Fields()
	require.Equal(t, int64(1), f[FieldReceived])
	require.Equal(t, int64(0), f[FieldAccepted])
	require.Equal(t, int64(1), f[FieldRefused])
	for _, reason := range FlowRefusals[1:] {
		require.Equal(t, int64(0), f[FieldRefusedPrefix+reason], reason)
	}
	sendFlowFrames(t, ns, flowFrames{udpFrame("203.0.113.5", "10.99.0.1", 123, 40000, 468), 19, 19})
}

// TestFlowRefusalsAreTheReceivers: the points' reasons are the receiver's.
func TestFlowRefusalsAreTheReceivers(t *testing.T) {
	require.Equal(t, flowspec.Reasons, FlowRefusals)
}

// opensReceived is how many OPEN messages gobgpd received from the plugin:
// one per session the plugin's address opened with it.
func (rs *routeServer) opensReceived() int {
	rs.t.Helper()
	out, err := rs.cliErr("neighbor", "127.0.0.1")
	require.NoError(rs.t, err, out)
	m := regexp.MustCompile(`Opens:\s+(\d+)\s+(\d+)`).FindStringSubmatch(out)
	require.NotNil(rs.t, m, "gobgp neighbor: %s", out)
	n, _ := strconv.Atoi(m[2])
	return n
}

// TestFlowSpecView: beside a running plugin with gobgpd's NTP rule in
// force and 37 frames dropped by it, a console view of the same config
// (as -status and -watch run it) lists the rule with its text and exact
// counts on the interface and the peer established with 1 rule accepted,
// read from the running instance's maps; it starts no session: gobgpd
// received one OPEN only, and the running plugin's session stays up, its
// uptime growing.
func TestFlowSpecView(t *testing.T) {
	rs := startRouteServer(t)
	ns := testns.New(t)
	p := flowPlugin(t, ns, rs)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitUp(t, ns, p)
	rs.rib("add", strings.Fields("match destination 10.9.0.1/32 protocol udp source-port ==123 packet-length >=400 then discard")...)
	waitInForce(t, p, 1)
	sendFlowFrames(t, ns, flowMix("203.0.113.5", 0)...)
	rules, before := flowGather(t, ns, p) // writes the peers' states
	require.NotNil(t, rules[ntpRuleText])
	id := rules[ntpRuleText].Tags()[TagRule]
	require.Equal(t, 1, rs.opensReceived())

	v := flowConfig("127.0.0.1", rs.port)
	v.Run.Observe, v.Run.ReadOnly = true, true
	require.NoError(t, v.Init())
	acc := &testutil.Accumulator{}
	inNS(t, ns, v, func() error { return v.Start(acc) })
	var snap Snapshot
	inNS(t, ns, v, func() error { snap = v.Snapshot(acc); return nil })
	inNS(t, ns, v, func() error { v.Stop(); return nil })
	require.Empty(t, acc.Errors)

	require.True(t, snap.FlowViewed)
	require.Equal(t, []FlowSpecSeries{{Interface: testns.Dev, Rule: id, Action: FlowActionDrop, Text: ntpRuleText,
		Packets: 37, Bytes: 37 * 468, DroppedPackets: 37, DroppedBytes: 37 * 468}}, snap.FlowSpec)
	require.Len(t, snap.FlowPeers, 1)
	peer := snap.FlowPeers[0]
	require.Equal(t, "127.0.0.1", peer.Peer)
	require.Equal(t, "established", peer.State)
	require.True(t, peer.Up)
	require.Equal(t, int64(1), peer.Received)
	require.Equal(t, int64(1), peer.Accepted)
	require.Equal(t, int64(0), peer.Refused)
	require.Equal(t, make([]int64, len(FlowRefusals)), peer.RefusedBy)
	require.GreaterOrEqual(t, peer.UptimeS, before.Fields()[FieldUptimeS].(int64))
	require.GreaterOrEqual(t, peer.LastUpdateS, int64(0))
	require.False(t, snap.FlowPeersAt.IsZero())
	require.False(t, snap.FlowPeersAt.After(snap.Time))

	// The running session is untouched: still the one gobgpd opened first.
	time.Sleep(1100 * time.Millisecond)
	_, after := flowGather(t, ns, p)
	require.Equal(t, true, after.Fields()[FieldUp])
	require.Greater(t, after.Fields()[FieldUptimeS].(int64), before.Fields()[FieldUptimeS].(int64))
	require.Equal(t, 1, rs.opensReceived(), "no session but the running plugin's")
	logLines(t, before, after)
}
