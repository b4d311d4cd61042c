//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrPinning marks a pin directory this process cannot use (no BPF
// filesystem, no permission); the program itself could still be loaded and
// attached without pins.
var ErrPinning = errors.New("pin_path unusable")

// PackageBPFFSAccess is the package's script that adds search permission
// for others on the BPF filesystem's root, when missing, and creates the
// default pin directory for the service group.
const PackageBPFFSAccess = "/usr/lib/telegraf-xdp-drop/bpffs-access"

// PreparePinDir creates dir (root/<interface>) for this process. When it
// cannot, the error wraps ErrPinning and names the command, run as root,
// that fixes it.
func PreparePinDir(root, dir string) error {
	err := os.MkdirAll(dir, 0o700)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %v; %s", ErrPinning, err, permissionFix(root, dir))
	default:
		return fmt.Errorf("%w: create pin directory: %v", ErrPinning, err)
	}
}

// permissionFix finds the directory that stops this process on its way to
// dir, and says what root can run about it.
func permissionFix(root, dir string) string {
	who := processUser()
	var path string
	for _, part := range splitPath(dir) {
		path = filepath.Join(path, part)
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			parent := filepath.Dir(path)
			return fmt.Sprintf("%s cannot create %s in %s; as root run: install -d -o %s -m 0700 %s",
				who, path, parent, userName(os.Getuid()), root)
		}
		if unix.Access(path, unix.X_OK) != nil {
			return fmt.Sprintf("%s may not pass through %s (mode %04o); as root run: chmod o+x %s, or for the package's pin directory: %s",
				who, path, st.Mode&0o7777, path, PackageBPFFSAccess)
		}
	}
	return fmt.Sprintf("%s may not write in %s; as root run: chown %s %s", who, dir, userName(os.Getuid()), dir)
}

func splitPath(p string) []string {
	parts := []string{"/"}
	for d := filepath.Clean(p); d != "/"; d = filepath.Dir(d) {
		parts = append(parts[:1], append([]string{filepath.Base(d)}, parts[1:]...)...)
	}
	return parts
}

func processUser() string {
	return "user " + userName(os.Getuid())
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
