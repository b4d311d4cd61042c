//go:build linux

package testns

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BPFFS mounts a BPF filesystem of the test's own, its root at mode, on a
// fresh directory, and unmounts it (with whatever was pinned there) when the
// test ends. Tests that pin so depend neither on the host's /sys/fs/bpf being
// mounted (ip netns exec, or a host without systemd, has none) nor on its
// mode (systemd mounts it 0700, a plain mount gives 1777).
//
// The plugin pins only on a BPF filesystem that PID 1 sees, since one private
// to a mount namespace vanishes with it: the test must run in PID 1's mount
// namespace, or in a PID namespace of its own whose PID 1 shares the test's
// mount namespace (unshare -m -p -f --mount-proc). Elsewhere it fails here,
// saying so, rather than later with the plugin's refusal.
func BPFFS(t testing.TB, mode os.FileMode) string {
	t.Helper()
	RequirePrivileged(t)
	dir, err := os.MkdirTemp("", "xdpdrop-bpffs-")
	if err != nil {
		t.Fatalf("BPF filesystem for the test: %v", err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, fmt.Sprintf("mode=%o", mode&0o7777)); err != nil {
		os.Remove(dir)
		t.Fatalf("mount -t bpf bpf %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the test's BPF filesystem %s: %v", dir, err)
			return
		}
		os.Remove(dir)
	})
	if !seenByPID1(dir) {
		t.Fatalf("the BPF filesystem mounted on %s is private to this test's mount namespace, so the plugin refuses to pin there: "+
			"run the test in PID 1's mount namespace (not under ip netns exec or unshare -m), or in a PID namespace of its own: unshare -m -p -f --mount-proc", dir)
	}
	return dir
}

// seenByPID1 reports whether the filesystem holding dir is mounted in PID
// 1's mount namespace, as the plugin requires of a pin path; true when PID
// 1's mounts cannot be read, as the plugin then cannot tell either.
func seenByPID1(dir string) bool {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false
	}
	mounts, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return true
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, line := range strings.Split(string(mounts), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 2 && fields[2] == dev {
			return true
		}
	}
	return false
}
