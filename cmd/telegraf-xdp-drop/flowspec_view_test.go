//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// freePort is a loopback TCP port free now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startGoBGP runs Debian's gobgpd, AS 65000, on a loopback port of its own,
// waiting for AS 65001 to connect from 127.0.0.1; it returns its BGP port
// and a runner of its CLI.
func startGoBGP(t *testing.T) (int, func(args ...string) string) {
	t.Helper()
	for _, bin := range []string{"gobgpd", "gobgp"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
				t.Fatalf("%s not installed (apt-get install gobgpd)", bin)
			}
			t.Skipf("%s not installed (apt-get install gobgpd)", bin)
		}
	}
	port, api := freePort(t), freePort(t)
	conf := filepath.Join(t.TempDir(), "gobgpd.toml")
	text := fmt.Sprintf("[global.config]\n  as = 65000\n  router-id = \"10.255.0.1\"\n  port = %d\n  local-address-list = [\"127.0.0.1\"]\n", port) +
		"[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"127.0.0.1\"\n    peer-as = 65001\n" +
		"  [neighbors.transport.config]\n    passive-mode = true\n  [neighbors.timers.config]\n    connect-retry = 1\n" +
		"  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"ipv4-flowspec\"\n"
	require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
	var out binarytest.Buffer
	cmd := testproc.Command("gobgpd", "-f", conf, "--api-hosts", fmt.Sprintf("127.0.0.1:%d", api), "-p", "--pprof-disable")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	cli := func(args ...string) (string, error) {
		b, err := exec.Command("gobgp", append([]string{"-u", "127.0.0.1", "-p", fmt.Sprint(api)}, args...)...).CombinedOutput()
		return string(b), err
	}
	for deadline := time.Now().Add(testns.Hang); ; time.Sleep(50 * time.Millisecond) {
		if _, err := cli("global"); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("gobgpd exited at start:\n%s", out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "gobgpd not up within %v:\n%s", testns.Hang, out.String())
	}
	return port, func(args ...string) string {
		t.Helper()
		s, err := cli(args...)
		require.NoError(t, err, "gobgp %s: %s", strings.Join(args, " "), s)
		return s
	}
}

// pointOf is the first point of ms named name, nil without one.
func pointOf(ms []telegraf.Metric, name string) telegraf.Metric {
	for _, m := range ms {
		if m.Name() == name {
			return m
		}
	}
	return nil
}

// TestViewsOfFlowSpec: beside an instance with [flowspec] whose gobgpd
// peer announced the NTP rule, which dropped 7 frames, -status -json,
// -status and -watch with the identical config list the rule (its text,
// action and exact counts on the interface) and the peer (established, 1
// rule accepted), and open no session of their own: gobgpd received the
// instance's OPEN only.
func TestViewsOfFlowSpec(t *testing.T) {
	port, gobgp := startGoBGP(t)
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error {
		link, err := ns.Netlink().LinkByName(testns.Dev)
		if err != nil {
			return err
		}
		return ns.Netlink().LinkSetUp(link)
	}))
	conf := writeConfig(t, fmt.Sprintf(`[[inputs.xdp_drop]]
  namespace = %q
  interfaces = [%q]
  handover_timeout = "0s"
  [inputs.xdp_drop.flowspec]
    local_as = 65001
    router_id = "10.255.0.2"
    only_local_destinations = false
    [[inputs.xdp_drop.flowspec.peer]]
      address = "127.0.0.1"
      port = %d
      peer_as = 65000
`, ns.Name, testns.Dev, port))
	instance := startHereAt(t, ns, conf, mustReadFile(t, conf))
	gatherUntil(t, instance, func(ms []telegraf.Metric) bool {
		p := pointOf(ms, "xdp_drop_flowspec_peer")
		return p != nil && p.Fields()["up"] == true
	})
	gobgp("global", "rib", "-a", "ipv4-flowspec", "add", "match", "destination", "10.9.0.1/32", "protocol", "udp", "source-port", "==123", "then", "discard")
	const text = "destination 10.9.0.1/32 protocol ==17 source-port ==123 then discard"
	gatherUntil(t, instance, func(ms []telegraf.Metric) bool { return pointOf(ms, "xdp_drop_flowspec") != nil })
	ntp := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 123, 40000)),
		netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("10.9.0.1")))
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, ntp, 7) }))
	ms := gatherUntil(t, instance, func(ms []telegraf.Metric) bool { return fieldOf(pointOf(ms, "xdp_drop_flowspec"), "packets") == 7 })
	id, _ := pointOf(ms, "xdp_drop_flowspec").GetTag("rule")
	opens := regexp.MustCompile(`Opens:\s+(\d+)\s+(\d+)`)
	require.Equal(t, "1", opens.FindStringSubmatch(gobgp("neighbor", "127.0.0.1"))[2], "OPENs gobgpd received")

	stdout, stderr, code := runSplit(t, exec.Command(binary, "-config", conf, "-status", "-json"))
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &report), stdout)
	require.NotNil(t, report.FlowSpec, stdout)
	require.Equal(t, []flowRuleStatus{{Interface: testns.Dev, Rule: id, Action: "drop", Text: text,
		Packets: 7, Bytes: uint64(7 * len(ntp)), DroppedPackets: 7, DroppedBytes: uint64(7 * len(ntp))}}, report.FlowSpec.Rules)
	require.Len(t, report.FlowSpec.Peers, 1)
	require.Regexp(t, `^flowspec peer 127\.0\.0\.1: up \d+s; 1 rules received, 1 accepted, 0 refused; last update \d+s ago$`, report.FlowSpec.Peers[0])
	require.Regexp(t, `^flowspec, read from the running instance: peers as of \d+s ago$`, report.FlowSpec.Note)

	stdout, stderr, code = runSplit(t, exec.Command(binary, "-config", conf, "-status"))
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Regexp(t, `(?m)^`+id+`\s+xdpt0\s+drop\s+7\s+7\s+`+regexp.QuoteMeta(text)+`$`, stdout)
	require.Regexp(t, `(?m)^flowspec peer 127\.0\.0\.1: up \d+s; 1 rules received, 1 accepted, 0 refused; `, stdout)

	watch := exec.Command(binary, "-config", conf, "-watch")
	var out, errOut binarytest.Buffer
	watch.Stdout, watch.Stderr = &out, &errOut
	require.NoError(t, testproc.Tie(watch).Start())
	done := make(chan error, 1)
	go func() { done <- watch.Wait() }()
	t.Cleanup(func() { watch.Process.Kill() })
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^xdpt0\s+destinati.*\s+drop\s+\S+\s+\S+(?: \S+)?\s+7$`),
		regexp.MustCompile(`(?m)^\s+flowspec peer 127\.0\.0\.1: up \d+s; 1 rules received, 1 accepted`),
		regexp.MustCompile(`(?m)^\s+flowspec, read from the running instance: peers as of \d+s ago$`),
	}
	all := func(screen string) bool {
		for _, re := range want {
			if !re.MatchString(screen) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(testns.Hang); !all(lastScreen(out.String())) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	screen := lastScreen(out.String())
	for _, re := range want {
		require.Regexp(t, re, screen, "stderr: %s", errOut.String())
	}
	require.NoError(t, watch.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done, "stderr: %s", errOut.String())

	require.Equal(t, "1", opens.FindStringSubmatch(gobgp("neighbor", "127.0.0.1"))[2], "no view opened a session")
	ms = instance.gather(t, testns.Dev)
	require.Equal(t, true, pointOf(ms, "xdp_drop_flowspec_peer").Fields()["up"])
	require.NotContains(t, errOut.String()+stderr, "E! ")
	require.NoError(t, instance.stdin.Close())
}
