//go:build linux

package main

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testns"
	"github.com/xdp-drop/xdp_drop/internal/traffic"
	"github.com/xdp-drop/xdp_drop/internal/txgen"
)

// TestWatchView runs the console view, with per_cpu, on known traffic sent
// from one CPU: its table shows the exact totals under that CPU per protocol
// and action, fits 80 columns, and Ctrl-C (SIGINT) detaches and exits 0.
func TestWatchView(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\", \"icmp\"]\n  per_cpu = true\n", testns.Dev))
	cmd := ns.Exec(binary, "-config", conf, "-watch")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitAttached(t, ns, testns.Dev)

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
	for !udp.MatchString(out.String()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	screen := out.String()
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

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	requireDetached(t, ns, "SIGINT to the watch view")
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", errOut.String())
	case <-time.After(testns.Hang):
		t.Fatalf("watch view still running %v after SIGINT", testns.Hang)
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
	cmd := ns.Exec(binary, "-config", conf, "-watch")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitAttached(t, ns, testns.Dev)
	// The first screen shows the view is running, its signal handler set.
	deadline := time.Now().Add(testns.Hang)
	for !strings.Contains(out.String(), "link xdpt0: attached") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, out.String(), "link xdpt0: attached")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	requireDetached(t, ns, "SIGTERM to the watch view")
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM; stderr: %s", errOut.String())
	case <-time.After(testns.Hang):
		t.Fatalf("watch view still running %v after SIGTERM", testns.Hang)
	}
	require.NotContains(t, errOut.String(), "E! ")
}
