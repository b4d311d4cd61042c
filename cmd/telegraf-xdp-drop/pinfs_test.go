//go:build linux

package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testns"
)

// TestPrivateBPFFSRefused: under ip netns exec the binary sees a fresh /sys
// without the host's BPF filesystem; one mounted there vanishes with the
// process. pin_path and keep_attached are refused there with the reason,
// instead of logging that the program was left attached.
func TestPrivateBPFFSRefused(t *testing.T) {
	ns := testns.New(t)
	pinPath := "/sys/fs/bpf/xdpdrop-test-private-" + ns.Name[len("xdpdrop-test-"):]
	t.Cleanup(func() { os.RemoveAll(pinPath) }) // only if it wrongly landed on the host's
	p := start(t, ns, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  pin_path = %q\n  keep_attached = true\n", testns.Dev, pinPath))
	ms := p.gather(t, testns.Dev)
	link := ms[len(ms)-1]
	require.Equal(t, false, link.Fields()["attached"])
	want := fmt.Sprintf(`pin_path = %q: the BPF filesystem there is private to this process's mount namespace (ip netns exec, for one, mounts a fresh /sys without the host's BPF filesystem), so its pins vanish when the process exits: counters would not survive a restart and keep_attached could keep nothing; run the binary in the host's mount namespace (not under ip netns exec) and reach the interfaces with the namespace option, or leave pin_path unset`, pinPath)
	require.Contains(t, link.Fields()["error"], want)
	waitLog(t, p, "E! Error in plugin: interface \"xdpt0\": "+want)
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id)
	require.NoError(t, p.stdin.Close())
	require.NoError(t, p.wait(t, 10*time.Second))
	require.NotContains(t, p.stderr.String(), "left attached")
}
