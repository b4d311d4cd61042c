//go:build linux

package testns

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// runDir holds the namespace files, as ip netns and vishvananda/netns name it.
const runDir = "/run/netns"

// deleteRetry bounds how long Delete retries a namespace file that is busy.
const deleteRetry = 3 * time.Second

// openRunDir opens runDir (creating it) as it is now, before the namespace
// is mounted in it: the directory fd reaches that mount even once another
// mount hides it.
func openRunDir() (int, error) {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return -1, err
	}
	fd, err := unix.Open(runDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", runDir, err)
	}
	return fd, nil
}

// removeNamed detaches every mount of the namespace file name in this mount
// namespace and removes the file, retrying while it is busy.
//
// unlink fails with EBUSY while any mount of this mount namespace sits on the
// file, hidden ones included. When runDir is a plain directory on a private
// mount (a host without systemd), the first ip netns add on the host
// bind-mounts runDir on itself, recursively: its copy of each namespace mount
// is what the path reaches, and the original is hidden beneath. dir, opened
// before the namespace was mounted, reaches the original.
func removeNamed(dir int, name string) error {
	path := filepath.Join(runDir, name)
	viaDir := fmt.Sprintf("/proc/self/fd/%d/%s", dir, name)
	deadline := time.Now().Add(deleteRetry)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		detachAll(path)
		if dir >= 0 {
			detachAll(viaDir)
		}
		err := os.Remove(path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("%w%s", err, mountsOn(path))
		}
		time.Sleep(wait)
	}
}

// detachAll lazily unmounts path until it is no mount point (mounts stack).
func detachAll(path string) {
	for range 64 {
		if unix.Unmount(path, unix.MNT_DETACH) != nil {
			return
		}
	}
}

// mountsOn names the mounts of this mount namespace still on path and what
// each is mounted in, for the error of a namespace that cannot be removed.
func mountsOn(path string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	point := map[string]string{} // mount id -> mount point
	var on [][2]string           // mount id, parent id
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 46 45 0:4 net:[4026532174] /run/netns/NAME rw shared:2 - nsfs nsfs rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		point[fields[0]] = unescapeMountinfo(fields[4])
		if point[fields[0]] == path {
			on = append(on, [2]string{fields[0], fields[1]})
		}
	}
	if len(on) == 0 {
		return ""
	}
	var s []string
	for _, m := range on {
		s = append(s, fmt.Sprintf("mount %s in mount %s (%s)", m[0], m[1], point[m[1]]))
	}
	return "; still mounted in this mount namespace: " + strings.Join(s, ", ")
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
