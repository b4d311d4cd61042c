//go:build linux

package testns_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

const stackedEnv = "XDP_DROP_TESTNS_STACKED"

// TestDeleteUnderStackedRunDir: on a host whose /run/netns is a plain
// directory on a private mount (no systemd), a neighbour's first ip netns
// add bind-mounts /run/netns on itself with a copy of every namespace mount
// in it, hiding the originals; Delete still removes the namespace. It runs
// in a mount namespace of its own with /run on a fresh tmpfs: that host.
func TestDeleteUnderStackedRunDir(t *testing.T) {
	if os.Getenv(stackedEnv) == "1" {
		deleteUnderStackedRunDir(t)
		return
	}
	testns.RequirePrivileged(t)
	cmd := testproc.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -t tmpfs tmpfs /run && exec "$0" -test.run='^TestDeleteUnderStackedRunDir$' -test.v`, os.Args[0])
	cmd.Env = append(os.Environ(), stackedEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestDeleteUnderStackedRunDir", "%s", out)
}

func deleteUnderStackedRunDir(t *testing.T) {
	n, err := testns.Create(testns.Prefix())
	require.NoError(t, err)
	neighbour := testns.Prefix() + "neighbour"
	out, err := exec.Command("ip", "netns", "add", neighbour).CombinedOutput()
	require.NoError(t, err, "%s", out)
	defer exec.Command("ip", "netns", "del", neighbour).Run()
	require.Equal(t, 2, mountsAt(t, "/run/netns/"+n.Name), "ip netns add stacked a copy over the namespace mount")

	require.NoError(t, n.Delete())
	require.NoFileExists(t, n.Path)
	require.Zero(t, mountsAt(t, "/run/netns/"+n.Name))
}

// TestDeleteWhileNeighboursHoldCopies: processes that sit in copies of the
// mount namespace made after the namespace (unshare -m, ip netns exec), and
// so hold copies of its mount, do not keep Delete from removing it.
func TestDeleteWhileNeighboursHoldCopies(t *testing.T) {
	n := testns.New(t)
	other := testns.New(t)
	for _, c := range []*exec.Cmd{
		testproc.Command("unshare", "--mount", "--propagation", "private", "--", "sleep", "600"),
		testproc.Command("unshare", "--mount", "--propagation", "unchanged", "--", "sleep", "600"),
		testproc.Tie(other.Exec("sleep", "600")),
	} {
		require.NoError(t, c.Start())
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		waitExec(t, c.Process.Pid, "sleep")
	}
	require.NoError(t, n.Delete())
	require.NoFileExists(t, n.Path)
}

// waitExec waits until pid runs comm: by then unshare and ip netns exec
// have copied the mount namespace.
func waitExec(t *testing.T, pid int, comm string) {
	deadline := time.Now().Add(testns.Hang)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		require.NoError(t, err)
		if strings.TrimSpace(string(b)) == comm {
			return
		}
		require.True(t, time.Now().Before(deadline), "pid %d never ran %s", pid, comm)
		time.Sleep(time.Millisecond)
	}
}

// mountsAt counts the mounts of this mount namespace on path, hidden ones too.
func mountsAt(t *testing.T, path string) int {
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	count := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			count++
		}
	}
	return count
}
