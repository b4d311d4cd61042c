//go:build linux

package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestTimerMode runs the binary as it runs without -poll_interval_disabled:
// it gathers on its own clock, with nothing written to its stdin, and the
// gathers carry the traffic sent meanwhile.
func TestTimerMode(t *testing.T) {
	ns := testns.New(t)
	p := startWith(t, ns, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n", testns.Dev),
		"-poll_interval", "100ms")
	waitAttached(t, ns, testns.Dev)
	for i := 0; i < 3; i++ {
		ms := p.read(t, testns.Dev)
		require.Equal(t, "xdp_drop_link", ms[len(ms)-1].Name())
	}

	mix := traffic.Mix()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.SendFlows(ns.PeerIdx, mix) }))
	want := int64(traffic.Total(mix))
	for {
		_, total := counts(p.read(t, testns.Dev))
		require.LessOrEqual(t, total, want)
		if total == want {
			break
		}
	}

	// Without -poll_interval_disabled stdin is not read: a signal stops it.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	requireDetached(t, ns, "SIGTERM in timer mode")
	require.NoError(t, p.wait(t), "stderr: %s", p.stderr)
}

// TestDebugFlag: -debug adds D! lines (the effective config among them) to
// what the binary logs; without it there are none.
func TestDebugFlag(t *testing.T) {
	ns := testns.New(t)
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\", 47]\n", testns.Dev)
	for _, debug := range []bool{false, true} {
		flags := []string{"-poll_interval_disabled"}
		if debug {
			flags = append(flags, "-debug")
		}
		p := startWith(t, ns, config, flags...)
		p.gather(t, testns.Dev)
		require.NoError(t, p.stdin.Close())
		require.NoError(t, p.wait(t), "stderr: %s", p.stderr)
		requireDetached(t, ns, "stdin closed")
		logged := p.stderr.String()
		if !debug {
			require.NotContains(t, logged, "D! ")
			continue
		}
		require.Regexp(t, `(?m)^D! config /\S+/xdp_drop\.conf: interfaces \["xdpt0"\], mode "", drop \[udp 47\]$`, logged)
		for _, line := range strings.Split(strings.TrimSpace(logged), "\n") {
			require.Regexp(t, `^[EWID]! [^0-9]`, line, "debug lines too carry a level prefix and no timestamp")
		}
	}
}
