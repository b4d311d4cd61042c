//go:build linux

// Package handover passes a stopping instance's XDP attachments to the
// instance that follows it, so that a reload never leaves an interface
// unfiltered. The stopping instance hands the descriptors (link, program,
// counters, and rule counters with rules) to a small holder process, the
// same binary re-executed, over a unix socket with SCM_RIGHTS; the holder
// offers each interface on a socket of its own and passes the descriptors
// on to the first successor that asks, the way hot-restarting proxies pass
// listening sockets. When everything holding the descriptors is gone, the
// kernel detaches: nothing is pinned.
//
// The package knows nothing of BPF: it moves descriptors and a header.
package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Key names an interface across processes: its network namespace (the
// inode of the namespace file) and its index there.
type Key struct {
	NetNS   uint64 `json:"netns"`
	Ifindex int    `json:"ifindex"`
}

// Header describes one offered attachment.
type Header struct {
	Key
	Interface   string `json:"interface"`
	Mode        string `json:"mode"`
	Fingerprint string `json:"fingerprint"`
	ProgramID   uint32 `json:"program_id"`
	MultiBuffer bool   `json:"multi_buffer,omitempty"`
}

// Offer is one interface's attachment: its header and its descriptors, in
// the order link, program, counters, and rule counters for a program with
// rules.
type Offer struct {
	Header
	FDs []int
}

// FDCount is the number of descriptors every offer has; MaxFDs the number
// an offer with rule counters has.
const (
	FDCount = 3
	MaxFDs  = FDCount + 1
)

// SharedKey is the key of the shared offer: what a stopping instance hands
// over once for all its interfaces (the maps their programs share), next to
// their offers. No interface has it. It is offered to every successor that
// asks (TakeShared), without an answer, and released with the last of the
// interfaces' offers.
var SharedKey = Key{}

// MaxSharedFDs is the number of descriptors the shared offer may have: the
// rule maps (5, and the limiter's cells), the ban maps (4) and the ban
// history, with room to spare.
const MaxSharedFDs = 16

// validFDs reports whether the offer of k may have n descriptors.
func validFDs(k Key, n int) bool {
	if k == SharedKey {
		return n >= 1 && n <= MaxSharedFDs
	}
	return n >= FDCount && n <= MaxFDs
}

// CurrentNetNS returns the key part that names the calling thread's network
// namespace. The caller must hold its OS thread when it has moved it.
func CurrentNetNS() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); err != nil {
		return 0, fmt.Errorf("identify the network namespace: %w", err)
	}
	return st.Ino, nil
}

// RunDir is the directory the package creates for the handover sockets
// (root:<service group> 0770, from its tmpfiles entry): unlike the shared
// temporary directory, no other user can create the per-user directory
// there first and so refuse every handover.
var RunDir = "/run/telegraf-xdp-drop"

// userDirPrefix and instancePrefix name the per-user directory and, inside
// it, the directory of one instance.
const (
	userDirPrefix  = "xdp_drop-handover-"
	instancePrefix = "i-"
)

// Dir is the directory of the handover sockets of this user:
// $RUNTIME_DIRECTORY (systemd's RuntimeDirectory=), else RunDir when it is a
// root-owned directory others cannot write to, else the temporary
// directory; then xdp_drop-handover-UID, mode 0700, so that no other user
// can reach the sockets. A base this user cannot create its directory in is
// passed over, so that the handover does not fail at the next reload; note
// then says which, and what root can run, for a warning at start.
func Dir() (dir, note string) {
	user := userDirPrefix + strconv.Itoa(os.Geteuid())
	if base, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":"); base != "" {
		err := usableBase(base, user)
		if err == nil {
			return filepath.Join(base, user), ""
		}
		note = fmt.Sprintf("RUNTIME_DIRECTORY %s: %v", base, err)
	}
	if trustedBase(RunDir) {
		err := usableBase(RunDir, user)
		if err == nil {
			return filepath.Join(RunDir, user), note
		}
		if note == "" {
			note = fmt.Sprintf("%v; as root run: systemd-tmpfiles --create /usr/lib/tmpfiles.d/telegraf-xdp-drop.conf "+
				"(or chown root:<the service user's group> %s && chmod 0770 %s)", err, RunDir, RunDir)
		}
	}
	return filepath.Join(os.TempDir(), user), note
}

// usableBase reports why this user could not create or use its directory
// user in base, or nil.
func usableBase(base, user string) error {
	if _, err := os.Lstat(filepath.Join(base, user)); err == nil {
		return nil // checked, with a clear error, when it is used
	}
	if err := unix.Faccessat(unix.AT_FDCWD, base, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
		var st unix.Stat_t
		if serr := unix.Stat(base, &st); serr != nil {
			return fmt.Errorf("%s: %w", base, serr)
		}
		return fmt.Errorf("%s (owner uid %d, group %d, mode %04o) is not writable by this user (uid %d)", base, st.Uid, st.Gid, st.Mode&0o7777, os.Geteuid())
	}
	return nil
}

// InstanceDir is the directory, inside the user's dir, of one instance's
// handover sockets: a stopped instance's attachments are offered only to a
// successor of the same instance. An empty instance is the user's directory.
func InstanceDir(dir, instance string) string {
	if instance == "" {
		return dir
	}
	return filepath.Join(dir, instancePrefix+instance)
}

// Prepare creates the handover directory, or says why it cannot be used:
// called at start, so that a handover that would fail is known before a
// reload needs it.
func Prepare(dir string) error { return ensureDir(dir) }

// trustedBase reports whether dir is a real directory owned by root that
// only root and its group may write to.
func trustedBase(dir string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 && st.Mode&0o002 == 0
}

func socketPath(dir string, k Key) string {
	if k == SharedKey {
		return filepath.Join(dir, "shared")
	}
	return filepath.Join(dir, fmt.Sprintf("%d-%d", k.NetNS, k.Ifindex))
}

// ensureDir creates dir (and the user's directory above an instance's),
// or checks that the existing one is ours and private: a directory others
// could write to would let them offer descriptors, or squat the names.
func ensureDir(dir string) error {
	if isInstanceDir(dir) {
		if err := ensureOne(filepath.Dir(dir)); err != nil {
			return err
		}
	}
	return ensureOne(dir)
}

func ensureOne(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create handover directory: %w", err)
	}
	return checkDir(dir)
}

func isInstanceDir(dir string) bool {
	return strings.HasPrefix(filepath.Base(dir), instancePrefix) && strings.HasPrefix(filepath.Base(filepath.Dir(dir)), userDirPrefix)
}

// checkDirs checks dir and, for an instance's, the user's directory above.
func checkDirs(dir string) error {
	if isInstanceDir(dir) {
		if err := checkDir(filepath.Dir(dir)); err != nil {
			return err
		}
	}
	return checkDir(dir)
}

func checkDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("handover directory: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("handover directory %s is not a directory: remove it", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("handover directory %s belongs to uid %d, not to this user (uid %d): remove it", dir, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return fmt.Errorf("handover directory %s has mode %04o; it must be 0700: remove it", dir, st.Mode&0o777)
	}
	return nil
}

// peerAllowed reports whether the process at the other end of c runs as
// this user or as root, and returns its pid (0 when it is not visible in
// this process's pid namespace).
func peerAllowed(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("read peer credentials: %w", credErr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return int(cred.Pid), fmt.Errorf("peer process %d runs as uid %d, neither this user (uid %d) nor root", cred.Pid, cred.Uid, os.Geteuid())
	}
	return int(cred.Pid), nil
}

// message is what goes over the sockets, one JSON object per packet.
type message struct {
	// holder setup (instance to holder)
	TimeoutNS int64   `json:"timeout_ns,omitempty"`
	Dir       string  `json:"dir,omitempty"`
	Offer     *Header `json:"offer,omitempty"`
	End       bool    `json:"end,omitempty"`
	// holder setup reply
	PID    int      `json:"pid,omitempty"`
	Errors []string `json:"errors,omitempty"`
	// successor to holder
	Take    bool   `json:"take,omitempty"`
	Manages []Key  `json:"manages,omitempty"`
	Accept  bool   `json:"accept,omitempty"`
	Refuse  string `json:"refuse,omitempty"`
	// holder to successor, after an accept
	Released []string `json:"released,omitempty"`
}

const maxMessage = 64 << 10

var errClosed = errors.New("connection closed")

func send(c *net.UnixConn, m message, fds []int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// receive reads one message and the descriptors that came with it; it
// closes any descriptor beyond want.
func receive(c *net.UnixConn, want int) (message, []int, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4*(MaxSharedFDs+1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	if flags&unix.MSG_CTRUNC != 0 {
		ferr = errors.Join(ferr, errors.New("descriptors truncated"))
	}
	if n == 0 {
		closeAll(fds)
		return message{}, nil, errClosed
	}
	if ferr != nil || len(fds) > want {
		closeAll(fds)
		return message{}, nil, fmt.Errorf("unexpected descriptors: %d (want at most %d) %v", len(fds), want, ferr)
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(fds)
		return message{}, nil, fmt.Errorf("decode message: %w", err)
	}
	return m, fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	var errs error
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		fds = append(fds, got...)
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	return fds, errs
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
