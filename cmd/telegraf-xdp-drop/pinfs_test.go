//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestPrivateBPFFSRefused: under ip netns exec the binary sees a fresh /sys
// without the host's BPF filesystem; one mounted there vanishes with the
// process. pin_path and keep_attached are refused there with the reason,
// instead of logging that the program was left attached; and no BPF
// filesystem is mounted there first, to vanish with the process.
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
	require.NoError(t, p.wait(t))
	require.NotContains(t, p.stderr.String(), "left attached")
	require.NotContains(t, p.stderr.String(), "mounted the BPF filesystem")
}

// startInHost runs the binary in this process's own mount and network
// namespaces, where the host's BPF filesystem is; the config must reach
// the test namespace's devices through the namespace option.
func startInHost(t *testing.T, ns *testns.NS, config string) *proc {
	t.Helper()
	require.Contains(t, config, fmt.Sprintf("namespace = %q", ns.Name), "attach only inside the test namespace")
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	return runProc(t, exec.Command(binary, "-config", writeConfig(t, config), "-poll_interval_disabled"))
}

// TestSharedPinPathNeverFights: two instances with keep_attached on one
// pin_path (in the host's mount namespace, reaching the test namespace with
// the namespace option, as the error above advises): the second neither
// takes over nor releases the first's kept link, and names its process.
// Once the first has stopped, leaving its link kept, the second takes it
// over in place.
func TestSharedPinPathNeverFights(t *testing.T) {
	ns := testns.New(t)
	pinPath := filepath.Join(testns.BPFFS(t, 0o700), "xdp_drop")
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  namespace = %q\n  drop = [\"all\"]\n  pin_path = %q\n  keep_attached = true\n  replace = true\n",
		testns.Dev, ns.Name, pinPath)
	first := startInHost(t, ns, config)
	firstID := waitAttached(t, ns, testns.Dev)
	first.gather(t, testns.Dev)
	linkPin := filepath.Join(pinPath, testns.Dev, "link")
	_, err := os.Stat(linkPin)
	require.NoError(t, err)

	second := startInHost(t, ns, config)
	for i := 0; i < 5; i++ {
		second.gather(t, testns.Dev)
		first.gather(t, testns.Dev)
	}
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, firstID, id, "the first keeps the interface")
	_, err = os.Stat(linkPin)
	require.NoError(t, err, "and its kept link")
	waitLog(t, second, fmt.Sprintf("pin_path: XDP program id %d (xdp_drop) belongs to a running instance: process %d (telegraf-xdp-dr) holds its link id ", firstID, first.cmd.Process.Pid))
	require.NotContains(t, first.stderr.String(), "E! ")

	require.NoError(t, first.stdin.Close())
	require.NoError(t, first.wait(t))
	require.Contains(t, first.stderr.String(), "left attached (keep_attached)")
	for deadline := time.Now().Add(testns.Hang); !strings.Contains(second.stderr.String(), "took over the attachment kept by an earlier run"); {
		require.True(t, time.Now().Before(deadline), "stderr: %s", second.stderr)
		second.gather(t, testns.Dev)
	}
	id, err = ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id)
	require.NoError(t, second.stdin.Close())
	require.NoError(t, second.wait(t))
}

// startOnHostWithoutBPFFS runs the binary, with the capabilities left after
// setprivArgs, in the test's network namespace and in mount and PID
// namespaces of its own whose /sys/fs/bpf has nothing mounted: a host that
// never mounted the BPF filesystem, as PID 1 of it sees it (the binary is
// that PID 1), whatever this machine's /sys/fs/bpf is.
func startOnHostWithoutBPFFS(t *testing.T, ns *testns.NS, config string, setprivArgs ...string) *proc {
	t.Helper()
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	args := []string{"--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private", "--",
		"sh", "-c", `while mountpoint -q /sys/fs/bpf; do umount -l /sys/fs/bpf || exit; done; exec "$@"`, "sh",
		"nsenter", "--net=" + ns.Path, "--", "setpriv"}
	args = append(append(args, setprivArgs...), "--", binary, "-config", writeConfig(t, config), "-poll_interval_disabled")
	return runProc(t, exec.Command("unshare", args...))
}

// TestPinPathHostWithoutBPFFS: on a host with no BPF filesystem on
// /sys/fs/bpf, root mounts one for pin_path = "/sys/fs/bpf/xdp_drop" and
// pins there; a process without CAP_SYS_ADMIN (the package's file
// capabilities) attaches without pins, and its warning names the mount to
// make. Either way the interface is attached.
func TestPinPathHostWithoutBPFFS(t *testing.T) {
	ns := testns.New(t)
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  pin_path = \"/sys/fs/bpf/xdp_drop\"\n  keep_attached = true\n", testns.Dev)
	for _, c := range []struct {
		name     string
		setpriv  []string
		log      string
		unpinned bool
	}{
		{"root", nil, "I! mounted the BPF filesystem on /sys/fs/bpf for pin_path", false},
		{"without CAP_SYS_ADMIN", []string{"--bounding-set=-sys_admin"}, `W! interface "` + testns.Dev + `": attaching without pins, so counters restart at every restart and nothing keeps it attached while no agent runs (keep_attached): ` +
			"pin_path unusable: no BPF filesystem on /sys/fs/bpf, and mounting one needs CAP_SYS_ADMIN, which this process lacks; " +
			"as root run: mount -t bpf bpf /sys/fs/bpf, or with systemd: systemctl start sys-fs-bpf.mount (ip netns exec mounts a /sys without it: use nsenter --net instead)", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startOnHostWithoutBPFFS(t, ns, config, c.setpriv...)
			ms := p.gather(t, testns.Dev)
			link := ms[len(ms)-1]
			require.Equal(t, true, link.Fields()["attached"], "stderr: %s", p.stderr)
			waitLog(t, p, c.log)
			if c.unpinned {
				require.NotContains(t, p.stderr.String(), "mounted the BPF filesystem")
			} else {
				require.NotContains(t, p.stderr.String(), "without pins")
			}
			require.NoError(t, p.stdin.Close())
			require.NoError(t, p.wait(t))
			requireDetached(t, ns, "its mount and PID namespaces ended")
		})
	}
}
