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

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// serviceUser is a copy of the binary with the file capabilities the
// package grants, its config, and a temporary directory of its own (so
// that its handover sockets are this test's), for runs as user 65534.
type serviceUser struct {
	bin, conf, tmp string
}

// noRunDir hides the host's /run/telegraf-xdp-drop, which the package's
// tests may create and remove meanwhile.
const noRunDir = "mount -t tmpfs -o mode=0755 tmpfs /run"

func newServiceUser(t *testing.T, config string) *serviceUser {
	t.Helper()
	// Not under /tmp, which the test's own directory is mounted on.
	dir, bin := binarytest.CopyForOthers(t, binary, "/var/tmp")
	s := &serviceUser{bin: bin, conf: filepath.Join(dir, "xdp_drop.conf"), tmp: filepath.Join(dir, "tmp")}
	require.NoError(t, exec.Command("setcap", setcapCaps, s.bin).Run())
	require.NoError(t, os.WriteFile(s.conf, []byte(config), 0o644))
	require.NoError(t, os.Mkdir(s.tmp, 0o755))
	require.NoError(t, os.Chmod(s.tmp, 0o1777))
	return s
}

// cmd runs the binary as user 65534 in the test namespace, in a mount
// namespace of its own where the test's directory is /tmp and the shell
// command wrap has run first. (TMPDIR would not do: the loader drops it for
// a binary with file capabilities.)
func (s *serviceUser) cmd(ns *testns.NS, wrap string) *exec.Cmd {
	args := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", s.bin, "-config", s.conf, "-poll_interval_disabled"}
	// unshare -m makes the mounts private: the host's /tmp and /run are untouched.
	script := "mount --bind " + s.tmp + " /tmp; " + wrap + `; exec "$@"`
	c := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns.Name, "--", "unshare", "-m", "--", "sh", "-ec", script, "sh"}, args...)...)
	c.Env = append(os.Environ(), "RUNTIME_DIRECTORY=")
	return c
}

// TestHandoverOverlapUnderFileCapabilities: as the service user with file
// capabilities, which may not read another program's name, a successor
// started while its predecessor still runs (as execd's restart may) waits
// for the predecessor's offer and takes the interface over, every time.
func TestHandoverOverlapUnderFileCapabilities(t *testing.T) {
	ns := testns.New(t)
	s := newServiceUser(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))

	prev := runProc(t, s.cmd(ns, noRunDir))
	attached, id, _ := linkPoint(t, prev.gather(t, testns.Dev))
	require.True(t, attached, "stderr: %s", prev.stderr)
	const restarts = 20
	took := 0
	for i := range restarts {
		next := runProc(t, s.cmd(ns, noRunDir))
		time.Sleep(300 * time.Millisecond) // both run
		require.NoError(t, prev.stdin.Close())
		require.NoError(t, prev.wait(t), "stderr: %s", prev.stderr)
		require.Contains(t, prev.stderr.String(), "held for handover", "restart %d", i)
		attached, got, msg := linkPoint(t, next.gather(t, testns.Dev))
		require.True(t, attached, "restart %d: not taken over at start: %s; stderr: %s", i, msg, next.stderr)
		require.Equal(t, id, got, "restart %d: the same program, taken over in place", i)
		waitLog(t, next, fmt.Sprintf("I! interface %q: taken over in place, program id %d; counters continue", testns.Dev, id))
		require.NotContains(t, next.stderr.String(), "E! ", "restart %d", i)
		took++
		prev = next
	}
	require.Equal(t, restarts, took)
}

// TestHandoverRunDirNotWritable: when the package's handover directory is
// root's but this user may not write to it (0755), the binary says so at
// start, names the fix, and hands over through the next directory, so a
// reload still takes the interfaces over; when no directory is usable, it
// says so at start, as an error.
func TestHandoverRunDirNotWritable(t *testing.T) {
	ns := testns.New(t)
	s := newServiceUser(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	const rootRunDir = "mount -t tmpfs -o mode=0755 tmpfs /run; mkdir -m 0755 /run/telegraf-xdp-drop"

	a := runProc(t, s.cmd(ns, rootRunDir))
	attached, id, _ := linkPoint(t, a.gather(t, testns.Dev))
	require.True(t, attached, "stderr: %s", a.stderr)
	require.Contains(t, a.stderr.String(), "W! handover: /run/telegraf-xdp-drop (owner uid 0, group 0, mode 0755) is not writable by this user (uid 65534); "+
		"as root run: systemd-tmpfiles --create /usr/lib/tmpfiles.d/telegraf-xdp-drop.conf")
	require.Contains(t, a.stderr.String(), "until then the handover sockets are in /tmp/xdp_drop-handover-65534/i-")
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t), "stderr: %s", a.stderr)
	require.NotContains(t, a.stderr.String(), "not held for handover")
	require.Contains(t, a.stderr.String(), "held for handover")

	b := runProc(t, s.cmd(ns, rootRunDir))
	attached, got, _ := linkPoint(t, b.gather(t, testns.Dev))
	require.True(t, attached, "stderr: %s", b.stderr)
	require.Equal(t, id, got)
	waitLog(t, b, "taken over in place")
	require.NoError(t, b.cmd.Process.Kill()) // detaches at once
	<-b.done

	t.Run("no usable directory", func(t *testing.T) {
		require.NoError(t, os.Chmod(s.tmp, 0o755))
		defer os.Chmod(s.tmp, 0o1777)
		out, errOut := gatherOnce(t, s.cmd(ns, rootRunDir+"; rm -rf /tmp/xdp_drop-handover-65534"))
		require.Contains(t, out, "xdp_drop_link")
		start, _, _ := strings.Cut(errOut, "xdp_drop_link")
		require.Contains(t, start, "E! handover: create handover directory: mkdir /tmp/xdp_drop-handover-65534: permission denied: "+
			"a stop could not hand the interfaces over", "said at start: %s", errOut)
	})
}
