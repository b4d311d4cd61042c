//go:build linux

package main

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestHandoverKeepAttachedWithoutPins: with keep_attached but a pin_path
// that cannot hold pins, the link is not pinned and nothing keeps the
// interface filtered past the process: the stop hands it over as without
// keep_attached, and does not claim to leave it attached.
func TestHandoverKeepAttachedWithoutPins(t *testing.T) {
	ns := testns.New(t)
	pins := t.TempDir() // not on a BPF filesystem
	a := start(t, ns, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  pin_path = %q\n  keep_attached = true\n", testns.Dev, pins))
	id := waitAttached(t, ns, testns.Dev)
	a.gather(t, testns.Dev)
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t), "exit status; stderr: %s", a.stderr)
	require.Contains(t, a.stderr.String(), "attaching without pins")
	require.NotContains(t, a.stderr.String(), "left attached (keep_attached)", "nothing pinned keeps it attached")
	pid := holderOf(t, a)
	now, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, now, "held after the exit")
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	waitGone(t, pid, testns.Hang)
}
