//go:build linux

package bpf

import (
	"errors"
	"strings"

	"fmt"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// DefaultBPFFS is where Linux conventionally mounts the BPF filesystem.
const DefaultBPFFS = "/sys/fs/bpf"

// MountBPFFS is the fix for a host without a BPF filesystem, as root.
const MountBPFFS = "mount -t bpf bpf " + DefaultBPFFS + ", or with systemd: systemctl start sys-fs-bpf.mount"

// ensureBPFFS checks that dir is on a BPF filesystem. When dir lies under
// /sys/fs/bpf and nothing is mounted there, it mounts one, as systemd does,
// but only in PID 1's mount namespace: one mounted anywhere else would
// vanish with the process.
func ensureBPFFS(dir string) (mounted bool, err error) {
	if onBPFFS(dir) {
		return false, nil
	}
	if !underDefaultBPFFS(dir) {
		return false, notOnBPFFS(dir)
	}
	if onBPFFS(DefaultBPFFS) {
		return false, nil
	}
	if !trust.HasCapability(unix.CAP_SYS_ADMIN) {
		return false, noBPFFSUnmountable()
	}
	if privateMountNS() {
		return false, &PinDirError{Root: dir, Reason: PinDirPrivate, Err: ErrPrivateBPFFS}
	}
	if err := unix.Mount("bpf", DefaultBPFFS, "bpf", 0, "mode=0700"); errors.Is(err, unix.EPERM) {
		return false, noBPFFSUnmountable()
	} else if err != nil {
		return false, &UnpinnableError{Why: fmt.Sprintf("mount the BPF filesystem on %s: %v; as root run: %s", DefaultBPFFS, err, MountBPFFS)}
	}
	return true, nil
}

// noBPFFSUnmountable says that /sys/fs/bpf has no BPF filesystem, which
// this process may not mount.
func noBPFFSUnmountable() error {
	return &UnpinnableError{Why: fmt.Sprintf("no BPF filesystem on %s, and mounting one needs CAP_SYS_ADMIN, which this process lacks; "+
		"as root run: %s (ip netns exec mounts a /sys without it: use nsenter --net instead)", DefaultBPFFS, MountBPFFS)}
}

func underDefaultBPFFS(dir string) bool {
	clean := filepath.Clean(dir)
	return clean == DefaultBPFFS || strings.HasPrefix(clean, DefaultBPFFS+"/")
}

// notOnBPFFS says that dir, outside /sys/fs/bpf, is on no BPF filesystem.
func notOnBPFFS(dir string) error {
	return &UnpinnableError{Why: fmt.Sprintf("%s is not on a BPF filesystem: use a path under %s, or as root mount one there: mkdir -p %s && mount -t bpf bpf %s",
		dir, DefaultBPFFS, dir, dir)}
}

// CheckPinPath says, reading only, what pinning under root would meet: the
// errors Acquire returns or notes (an *UnpinnableError: attached without
// pins; a *PinDirError: refused), or nil. It mounts and creates nothing;
// where Acquire would mount the BPF filesystem (no BPF filesystem on
// /sys/fs/bpf), the *UnpinnableError says so.
func CheckPinPath(root string) error {
	if !onBPFFS(root) {
		if !underDefaultBPFFS(root) {
			return notOnBPFFS(root)
		}
		if !trust.HasCapability(unix.CAP_SYS_ADMIN) {
			return noBPFFSUnmountable()
		}
		if privateMountNS() {
			return &PinDirError{Root: root, Reason: PinDirPrivate, Err: ErrPrivateBPFFS}
		}
		return &UnpinnableError{Why: fmt.Sprintf("no BPF filesystem on %s now: this process (with CAP_SYS_ADMIN) mounts one there when it starts, "+
			"one without CAP_SYS_ADMIN (under the package's file capabilities) attaches without pins; as root run: %s", DefaultBPFFS, MountBPFFS)}
	}
	if err := checkPersistent(root); err != nil {
		return &PinDirError{Root: root, Reason: PinDirPrivate, Err: err}
	}
	if err := checkPinDir(root); err != nil {
		return &PinDirError{Root: root, Reason: PinRootNotDir, Err: err}
	}
	return nil
}

// ErrPrivateBPFFS is returned when the BPF filesystem under a pin path is
// visible only in this process's mount namespace: its pins vanish with the
// process.
var ErrPrivateBPFFS = errors.New("the BPF filesystem there is private to this process's mount namespace (ip netns exec, for one, mounts a fresh /sys without the host's BPF filesystem), so its pins vanish when the process exits")

// checkPersistent returns ErrPrivateBPFFS when the BPF filesystem holding
// dir is not mounted in the mount namespace of PID 1, which outlives this
// process. When PID 1's mounts cannot be read it cannot tell, and returns nil.
func checkPersistent(dir string) error {
	if !seenByPID1(dir, "bpf") {
		return ErrPrivateBPFFS
	}
	return nil
}

// seenByPID1 reports whether the filesystem holding the closest existing
// ancestor of dir is mounted in PID 1's mount namespace (as fstype, unless
// ""); true when PID 1's mounts cannot be read, as it cannot tell.
func seenByPID1(dir, fstype string) bool {
	var st unix.Stat_t
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if err := unix.Stat(d, &st); err == nil {
			break
		}
		if d == "/" {
			return true
		}
	}
	mounts, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return true
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, line := range strings.Split(string(mounts), "\n") {
		// mount ID, parent ID, major:minor, root, mount point, ... - fstype ...
		fields := strings.Fields(line)
		_, post, ok := strings.Cut(line, " - ")
		if ok && len(fields) > 2 && fields[2] == dev && (fstype == "" || strings.HasPrefix(post, fstype+" ")) {
			return true
		}
	}
	return false
}

// privateMountNS reports whether a BPF filesystem mounted on /sys/fs/bpf
// now would be this thread's alone: the mount that holds /sys/fs/bpf is not
// one of PID 1's (mount IDs are unique across namespaces: one copied by
// unshare -m, or the fresh /sys of ip netns exec, has its own). When it
// cannot tell, it says no.
func privateMountNS() bool {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, DefaultBPFFS, 0, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		return !seenByPID1(DefaultBPFFS, "")
	}
	mounts, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return false
	}
	id := strconv.FormatUint(stx.Mnt_id, 10)
	for _, line := range strings.Split(string(mounts), "\n") {
		if first, _, _ := strings.Cut(line, " "); first == id {
			return false
		}
	}
	return true
}

// onBPFFS reports whether the closest existing ancestor of dir is on bpffs.
func onBPFFS(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err == nil {
			return st.Type == unix.BPF_FS_MAGIC
		}
		if d == "/" {
			return false
		}
	}
}

// checkPinDir returns an error when path exists and is not a directory,
// naming what it is instead (a pinned map, program or link on bpffs).
func checkPinDir(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && st.IsDir() {
		return nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil // creating the pin directory says what blocks and how to fix it
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s is %s, not a directory", path, pinnedKind(path))
}

// pinnedKind names the BPF object pinned at path, or "a file".
func pinnedKind(path string) string {
	if m, err := ebpf.LoadPinnedMap(path, nil); err == nil {
		m.Close()
		return "a pinned BPF map"
	}
	if p, err := ebpf.LoadPinnedProgram(path, nil); err == nil {
		p.Close()
		return "a pinned BPF program"
	}
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		l.Close()
		return "a pinned BPF link"
	}
	return "a file"
}

// pinDir returns the interface's pin directory, ready for pins: on a BPF
// filesystem that outlives the process (mounted on /sys/fs/bpf when nothing
// is), and ours.
func pinDir(w Want, got *Got) (string, error) {
	mounted, err := ensureBPFFS(w.PinPath)
	if err != nil {
		return "", err
	}
	if mounted {
		got.Notes = append(got.Notes, Note{Kind: NoteMountedBPFFS, Instance: true, Text: fmt.Sprintf("mounted the BPF filesystem on %s for the pins", DefaultBPFFS)})
	}
	if err := checkPersistent(w.PinPath); err != nil {
		return "", &PinDirError{Root: w.PinPath, Reason: PinDirPrivate, Err: err}
	}
	dir := pinDirOf(w)
	if err := checkPinDir(w.PinPath); err != nil {
		return "", &PinDirError{Root: w.PinPath, Reason: PinRootNotDir, Err: err}
	}
	if err := checkPinDir(dir); err != nil {
		return "", &PinDirError{Root: w.PinPath, Reason: PinDirNotOurs, Err: err}
	}
	if err := preparePinDir(w.PinPath, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// pinDirOf is the interface's pin directory.
func pinDirOf(w Want) string { return filepath.Join(w.PinPath, w.Name) }

// PackageBPFFSAccess is the package's script that adds search permission
// for others on the BPF filesystem's root, when missing, and creates the
// default pin directory for the service group.
const PackageBPFFSAccess = "/usr/lib/telegraf-xdp-drop/bpffs-access"

// preparePinDir creates dir (root/<interface>) for this process. When it
// cannot, the error is an *UnpinnableError that names the command, run as root,
// that fixes it.
func preparePinDir(root, dir string) error {
	err := os.MkdirAll(dir, 0o700)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrPermission):
		return &UnpinnableError{Why: fmt.Sprintf("%v; %s", err, permissionFix(root, dir))}
	default:
		return &UnpinnableError{Why: fmt.Sprintf("create pin directory: %v", err)}
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
