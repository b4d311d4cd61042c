//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestWatchView runs the console view, with per_cpu, on known traffic sent
// from one CPU: its table shows the exact totals under that CPU per protocol
// and action, fits 80 columns, and Ctrl-C (SIGINT) detaches and exits 0.
func TestWatchView(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\", \"icmp\"]\n  per_cpu = true\n", testns.Dev))
	w := startWatch(t, ns, conf)

	mix := traffic.Mix()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	cpus, err := txgen.AllowedCPUs()
	require.NoError(t, err)
	cpu := cpus[len(cpus)-1]
	require.NoError(t, ns.Do(func() error {
		return txgen.OnCPU(cpu, func() error { return gen.SendFlows(ns.PeerIdx, mix) })
	}))

	// 50 plain and 12 tagged IPv4/UDP frames: 62 in all. Rates are
	// render's unit tests' business; here the totals are exact.
	row := func(rest string) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^xdpt0/c%d\s+%s$`, cpu, rest))
	}
	udp := row(`ipv4\s+udp\s+drop\s+[\d,]+\s+[\d.]+ [kMG]?B/s\s+62`)
	deadline := time.Now().Add(testns.Hang)
	for !udp.MatchString(w.out.String()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	screen := w.out.String()
	require.Regexp(t, udp, screen)
	require.Regexp(t, row(`ipv4\s+tcp\s+pass\s+[\d,]+\s+[\d.]+ [kMG]?B/s\s+40`), screen)
	require.Regexp(t, row(`l2\s+arp\s+pass\s+[\d,]+\s+[\d.]+ [kMG]?B/s\s+6`), screen)
	for _, line := range strings.Split(lastScreen(screen), "\n") {
		if strings.HasPrefix(line, "xdpt0/") {
			require.True(t, strings.HasPrefix(line, fmt.Sprintf("xdpt0/c%d ", cpu)), "only CPU %d sent: %q", cpu, line)
		}
	}
	require.Regexp(t, `(?m)^total\s+drop\s+[\d,]+`, screen)
	require.Contains(t, screen, "PKTS/S")
	require.Contains(t, screen, "link xdpt0: attached, native mode, program id")
	for _, line := range strings.Split(screen, "\n") {
		require.LessOrEqual(t, len(line), 80, "line wider than 80 columns: %q", line)
	}
	t.Logf("watch view:\n%s", lastScreen(screen))

	w.stop(t, ns, syscall.SIGINT, "SIGINT")
}

// watchView is the console view (-watch) of the binary, running in a
// namespace.
type watchView struct {
	cmd         *exec.Cmd
	out, errOut binarytest.Buffer
	done        chan error
}

// startWatch starts the watch view on conf and waits until it has attached
// to testns.Dev; the test's end kills it if it still runs.
func startWatch(t *testing.T, ns *testns.NS, conf string) *watchView {
	t.Helper()
	w := &watchView{cmd: ns.Exec(binary, "-config", conf, "-watch"), done: make(chan error, 1)}
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.errOut
	require.NoError(t, testproc.Tie(w.cmd).Start())
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() { w.cmd.Process.Kill() })
	waitAttached(t, ns, testns.Dev)
	return w
}

// stop sends sig (named name) and requires the view to detach and exit 0.
func (w *watchView) stop(t *testing.T, ns *testns.NS, sig syscall.Signal, name string) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(sig))
	requireDetached(t, ns, name+" to the watch view")
	select {
	case err := <-w.done:
		require.NoError(t, err, "exit status after %s; stderr: %s", name, w.errOut.String())
	case <-time.After(testns.Hang):
		t.Fatalf("watch view still running %v after %s", testns.Hang, name)
	}
}

func lastScreen(s string) string {
	screens := strings.Split(strings.TrimSpace(s), "\n\n")
	return screens[len(screens)-1]
}

// TestWatchStopsOnSIGTERM: the watch view stopped the way a service manager
// stops it, with SIGTERM, detaches and exits 0 like Ctrl-C does.
func TestWatchStopsOnSIGTERM(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))
	w := startWatch(t, ns, conf)
	// The first screen shows the view is running, its signal handler set.
	deadline := time.Now().Add(testns.Hang)
	for !strings.Contains(w.out.String(), "link xdpt0: attached") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, w.out.String(), "link xdpt0: attached")

	w.stop(t, ns, syscall.SIGTERM, "SIGTERM")
	require.NotContains(t, w.errOut.String(), "E! ")
}

// TestWatchRules runs the console view on a config with rules and known
// traffic: the rule section lists the rules in config order (the order they
// are checked in), with the exact frames each decided, a rule that matched
// nothing at 0, a 64-character name shortened in its column, and the
// rule's action as xdp_drop_rule reports it (would_drop in a dry run).
func TestWatchRules(t *testing.T) {
	const long = "shed-reflection-from-the-upstream-transit-provider-at-site-ams-1"
	require.Len(t, long, 64)
	udp := func(src, dst string, sport, dport uint16) []byte {
		l4 := frames.Ports(frames.UDP(18), sport, dport)
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, l4), netip.MustParseAddr(src), netip.MustParseAddr(dst)))
	}
	flows := []struct {
		frame []byte
		count int
	}{
		{udp("192.0.2.7", "198.51.100.9", 11211, 9), 7},        // mgmt, first of the two that match
		{udp("203.0.113.5", "198.51.100.9", 11211, 40000), 11}, // memcached-reflection
		{udp("203.0.113.5", "198.51.100.53", 40000, 53), 13},   // dns-to-resolver
		{udp("203.0.113.5", "198.51.100.9", 5, 9), 17},         // no rule: drop = ["udp"]
	}
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry_run=%v", dry), func(t *testing.T) {
			drop := "drop"
			if dry {
				drop = "would_drop"
			}
			ns := testns.New(t)
			require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
			conf := writeConfig(t, fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = [%q]
  drop = ["udp"]
  dry_run = %v
  [[inputs.xdp_drop.rule]]
    name = "mgmt"
    action = "pass"
    src_prefix = ["192.0.2.0/24"]
  [[inputs.xdp_drop.rule]]
    name = "memcached-reflection"
    action = "drop"
    protocol = ["udp"]
    src_port = [11211]
  [[inputs.xdp_drop.rule]]
    name = %q
    action = "drop"
    protocol = ["gre"]
  [[inputs.xdp_drop.rule]]
    name = "dns-to-resolver"
    action = "pass"
    protocol = ["udp"]
    dst_prefix = ["198.51.100.53/32"]
    dst_port = [53]
`, testns.Dev, dry, long))
			w := startWatch(t, ns, conf)

			gen, err := txgen.New()
			require.NoError(t, err)
			defer gen.Close()
			require.NoError(t, ns.Do(func() error {
				for _, f := range flows {
					if err := gen.Send(ns.PeerIdx, f.frame, f.count); err != nil {
						return err
					}
				}
				return nil
			}))

			// The rule section, in config order, right after its header.
			const rates = `\s+[\d,]+\s+[\d.]+ [kMG]?B/s\s+`
			section := regexp.MustCompile(`(?m)^INTERFACE\s+RULE\s+ACTION\s+PKTS/S\s+BYTES/S\s+TOTAL PKTS\n` +
				`xdpt0\s+mgmt\s+pass` + rates + `7\n` +
				`xdpt0\s+memcached-reflection\s+` + drop + rates + `11\n` +
				`xdpt0\s+shed-refl\.\.\.te-ams-1\s+` + drop + `\s+0\s+0\.0 B/s\s+0\n` +
				`xdpt0\s+dns-to-resolver\s+pass` + rates + `13\n`)
			deadline := time.Now().Add(testns.Hang)
			for !section.MatchString(lastScreen(w.out.String())) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			screen := lastScreen(w.out.String())
			require.Regexp(t, section, screen)
			// The classes count the same frames by the action they got.
			require.Regexp(t, `(?m)^xdpt0\s+ipv4\s+udp\s+`+drop+rates+`28$`, screen)
			require.Regexp(t, `(?m)^xdpt0\s+ipv4\s+udp\s+pass`+rates+`20$`, screen)
			for _, line := range strings.Split(w.out.String(), "\n") {
				require.LessOrEqual(t, len(line), width, "line wider than %d columns: %q", width, line)
			}
			t.Logf("watch view:\n%s", screen)

			w.stop(t, ns, syscall.SIGINT, "SIGINT")
		})
	}
}
