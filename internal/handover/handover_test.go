//go:build linux

package handover

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// connectEnv makes the test binary, run as another user, try to take an
// offer at the socket path it names and print what it got.
const connectEnv = "XDP_DROP_TEST_CONNECT"

func TestMain(m *testing.M) {
	RunHolderIfRequested()
	if path := os.Getenv(connectEnv); path != "" {
		fmt.Println(connectAndTake(path))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func connectAndTake(path string) string {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return "connect: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(hang))
	if err := send(c, message{Take: true}, nil); err != nil {
		return "send: " + err.Error()
	}
	_, fds, err := receive(c, FDCount)
	if err != nil {
		return "receive: " + err.Error()
	}
	return fmt.Sprintf("received %d descriptors", len(fds))
}

// logger collects a holder's log lines.
type logger struct {
	mu    sync.Mutex
	lines []string
}

func (l *logger) Infof(format string, args ...any) { l.add("I! " + fmt.Sprintf(format, args...)) }
func (l *logger) Warnf(format string, args ...any) { l.add("W! " + fmt.Sprintf(format, args...)) }
func (l *logger) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *logger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// pipeOffer is an offer of three pipe descriptors, which the holder treats
// like any others; readEnd tells when the holder has closed its copies.
func pipeOffer(t *testing.T, name string, ifindex int) (Offer, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	fds := make([]int, FDCount)
	for i := range fds {
		fds[i], err = unix.Dup(int(w.Fd()))
		require.NoError(t, err)
	}
	w.Close()
	return Offer{Header: Header{Key: Key{NetNS: 1, Ifindex: ifindex}, Interface: name, Mode: "native"}, FDs: fds}, r
}

// closedBy waits until every write end of the pipe is closed.
// hang bounds every wait for an outcome: only a hang exceeds it, however
// loaded the machine (latencies are for make bench).
const hang = time.Minute

func closedBy(t *testing.T, r *os.File, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, r); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("descriptors still held after %v", d)
	}
}

func TestHolderReleasesAtTimeout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	log := &logger{}
	h, errs := NewHolder(dir, 200*time.Millisecond, []Offer{o}, log)
	require.NoError(t, errs[0])
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "only this user reaches the sockets")
	h.Wait(nil)
	closedBy(t, r, hang)
	require.Equal(t, `I! interface "eth1": released after 200ms: no successor`, log.String())
	_, err = os.Stat(socketPath(dir, o.Key))
	require.ErrorIs(t, err, os.ErrNotExist, "socket removed")
}

// TestHolderTimeoutWhileTaking: when the timeout comes while a successor
// holds the descriptors and has not answered, the log does not claim there
// was no successor; the successor's copies keep the attachment.
func TestHolderTimeoutWhileTaking(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	log := &logger{}
	h, errs := NewHolder(dir, 2*time.Second, []Offer{o}, log)
	require.NoError(t, errs[0])
	done := make(chan struct{})
	go func() { h.Wait(nil); close(done) }()
	got, err := Take(dir, o.Key, []Key{o.Key}, hang)
	require.NoError(t, err)
	require.NotNil(t, got)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("holder still waiting after its timeout")
	}
	require.Equal(t, `I! interface "eth1": released after 2s, while a successor was taking it over (it holds the attachment itself)`, log.String())
	require.Nil(t, got.Accept(), "nothing left to release")
	closeAll(got.FDs)
	closedBy(t, r, time.Second)
}

func TestHolderReleasesOnSignal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	log := &logger{}
	h, _ := NewHolder(dir, time.Hour, []Offer{o}, log)
	stop := make(chan os.Signal, 1)
	stop <- syscall.SIGTERM
	h.Wait(stop)
	closedBy(t, r, hang)
	require.Equal(t, `I! interface "eth1": released at once: the handover process received SIGTERM`, log.String())
}

// TestTakeAcceptRefuse: a successor takes the offer of an interface it
// manages; a refusal leaves it held; the offers of interfaces it does not
// manage are released when it accepts, and then the holder is done.
func TestTakeAcceptRefuse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o1, r1 := pipeOffer(t, "eth1", 7)
	o2, r2 := pipeOffer(t, "eth2", 8)
	log := &logger{}
	h, errs := NewHolder(dir, time.Hour, []Offer{o1, o2}, log)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	done := make(chan struct{})
	go func() { h.Wait(nil); close(done) }()

	nothing, err := Take(dir, Key{NetNS: 1, Ifindex: 9}, nil, hang)
	require.NoError(t, err)
	require.Nil(t, nothing, "no offer for an interface not held")

	got, err := Take(dir, o1.Key, []Key{o1.Key}, hang)
	require.NoError(t, err)
	require.Equal(t, o1.Header, got.Header)
	require.Len(t, got.FDs, FDCount)
	closeAll(got.FDs)
	got.Refuse("test refuses")
	require.Eventually(t, func() bool {
		return strings.Contains(log.String(), `the successor refused the handover: test refuses; still held`)
	}, hang, 10*time.Millisecond, "log: %s", log)

	got, err = Take(dir, o1.Key, []Key{o1.Key}, hang)
	require.NoError(t, err, "still offered after a refusal")
	closeAll(got.FDs)
	require.Equal(t, []string{"eth2"}, got.Accept(), "eth2 is not managed")
	closedBy(t, r1, hang)
	closedBy(t, r2, hang)
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("holder still waiting with nothing held")
	}
	require.Contains(t, log.String(), `I! interface "eth2": released at once: the successor does not manage it`)
}

// TestOtherUserRefused: another user can neither reach the sockets (the
// directory is private) nor, were it reachable, be handed anything (the
// holder checks the peer's uid).
func TestOtherUserRefused(t *testing.T) {
	testns.RequirePrivileged(t)
	bin := readableCopy(t)
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	log := &logger{}
	h, errs := NewHolder(dir, time.Hour, []Offer{o}, log)
	require.NoError(t, errs[0])
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { h.Wait(stop); close(done) }()
	defer func() { stop <- syscall.SIGTERM; <-done }()
	path := socketPath(dir, o.Key)

	asNobody := func() string {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), connectEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := testproc.Tie(cmd).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	require.Contains(t, asNobody(), "permission denied", "the private directory keeps others out")

	// Open the way, as a careless administrator might: the uid check holds.
	require.NoError(t, os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(path, 0o777))
	// The holder hangs up before or after the request: nothing is handed.
	out := asNobody()
	require.Regexp(t, `^(send|receive): `, out)
	require.NotContains(t, out, "received")
	require.Eventually(t, func() bool {
		return strings.Contains(log.String(), "refused a handover request: peer process")
	}, hang, 10*time.Millisecond)
	require.Contains(t, log.String(), "runs as uid 65534, neither this user (uid 0) nor root")

	// And a successor of this user now refuses the directory.
	_, err := Take(dir, o.Key, nil, hang)
	require.ErrorContains(t, err, "has mode 0755; it must be 0700")
	require.NoError(t, os.Chmod(dir, 0o700))
	got, err := Take(dir, o.Key, nil, hang)
	require.NoError(t, err)
	closeAll(got.FDs)
	got.Accept()
	closedBy(t, r, hang)
}

// readableCopy copies the test binary where another user can run it.
func readableCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "xdp-drop-handover-test")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	bin := filepath.Join(dir, "handover.test")
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	return bin
}

// TestDirPrefersRunDir: the package's run directory is used when it is
// root's and closed to others; a world-writable one, a symbolic link or a
// missing one falls back to the temporary directory, and RUNTIME_DIRECTORY
// wins over both.
func TestDirPrefersRunDir(t *testing.T) {
	testns.RequirePrivileged(t) // the run directory must be root's
	saved := RunDir
	t.Cleanup(func() { RunDir = saved })
	t.Setenv("RUNTIME_DIRECTORY", "")
	t.Setenv("TMPDIR", t.TempDir())
	dir := func() string { d, _ := Dir(); return d }
	user := "xdp_drop-handover-" + strconv.Itoa(os.Geteuid())
	inTmp := filepath.Join(os.TempDir(), user)

	base := t.TempDir()
	RunDir = filepath.Join(base, "run")
	require.Equal(t, inTmp, dir(), "missing run directory")

	require.NoError(t, os.Mkdir(RunDir, 0o770))
	require.Equal(t, filepath.Join(RunDir, user), dir())

	require.NoError(t, os.Chmod(RunDir, 0o777))
	require.Equal(t, inTmp, dir(), "world-writable run directory")

	require.NoError(t, os.Chmod(RunDir, 0o770))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(RunDir, link))
	RunDir = link
	require.Equal(t, inTmp, dir(), "run directory behind a symbolic link")

	runtime := t.TempDir()
	t.Setenv("RUNTIME_DIRECTORY", runtime+":/run/more")
	require.Equal(t, filepath.Join(runtime, user), dir())

	t.Setenv("RUNTIME_DIRECTORY", "/run/elsewhere-missing")
	got, note := Dir()
	require.Equal(t, inTmp, got, "a RUNTIME_DIRECTORY that is not there is passed over")
	require.Contains(t, note, "RUNTIME_DIRECTORY /run/elsewhere-missing: ")
}

// TestTakeStuckHolder: a stopped holder is not waited for, and one that
// does not answer is waited for only as long as asked; both errors name the
// holder's pid. Once it runs again, its offer is taken.
func TestTakeStuckHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	pid, errs, err := Spawn(dir, time.Minute, []Offer{o})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	closeAll(o.FDs) // the holder has its copies
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.Eventually(t, func() bool { return stopped(pid) }, hang, time.Millisecond)
	began := time.Now()
	got, err := Take(dir, o.Key, []Key{o.Key}, hang)
	took := time.Since(began)
	require.Nil(t, got)
	var stuck *StuckError
	require.ErrorAs(t, err, &stuck)
	require.Equal(t, &StuckError{PID: pid, Stopped: true}, stuck)
	require.EqualError(t, err, fmt.Sprintf("handover process %d, which holds it for a stopped instance, is stopped (SIGSTOP)", pid))
	t.Logf("Take of a stopped holder returned after %v", took)

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	got, err = Take(dir, o.Key, []Key{o.Key}, hang)
	require.NoError(t, err)
	require.NotNil(t, got, "taken once the holder runs again")
	closeAll(got.FDs)
	got.Accept()
	closedBy(t, r, hang)
}

// TestTakeSilentHolder: a holder that accepts and never answers is waited
// for no longer than Take is told.
func TestTakeSilentHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	require.NoError(t, ensureDir(dir))
	k := Key{NetNS: 1, Ifindex: 7}
	ln, err := listen(socketPath(dir, k))
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	got, err := Take(dir, k, nil, 200*time.Millisecond)
	require.Nil(t, got)
	require.EqualError(t, err, fmt.Sprintf("handover process %d, which holds it for a stopped instance, did not answer within 200ms", os.Getpid()))
}

// TestSharedOffer: the shared offer goes to every successor that asks,
// with no answer due, and is released with the last interface's offer; a
// holder with nothing but the shared offer holds nothing.
func TestSharedOffer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	shared, rs := pipeOffer(t, "", 0)
	shared.Key = SharedKey
	shared.Fingerprint = "rules:key"
	for len(shared.FDs) < 5 { // as many as the rule maps
		fd, err := unix.Dup(shared.FDs[0])
		require.NoError(t, err)
		shared.FDs = append(shared.FDs, fd)
	}
	log := &logger{}
	h, errs := NewHolder(dir, time.Hour, []Offer{shared, o}, log)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	done := make(chan struct{})
	go func() { h.Wait(nil); close(done) }()

	require.True(t, Offered(dir, SharedKey))
	for range 2 {
		got, err := TakeShared(dir, hang)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, "rules:key", got.Fingerprint)
		require.Len(t, got.FDs, 5)
		closeAll(got.FDs)
	}
	taken, err := Take(dir, o.Key, []Key{o.Key}, hang)
	require.NoError(t, err)
	closeAll(taken.FDs)
	require.Empty(t, taken.Accept())
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("holder still waiting with every interface taken")
	}
	closedBy(t, r, hang)
	closedBy(t, rs, hang)
	got, err := TakeShared(dir, hang)
	require.NoError(t, err)
	require.Nil(t, got, "released with the last interface")

	alone, rs := pipeOffer(t, "", 0)
	alone.Key = SharedKey
	h, errs = NewHolder(filepath.Join(t.TempDir(), "h"), time.Hour, []Offer{alone}, log)
	require.NoError(t, errs[0])
	h.Wait(nil)
	closedBy(t, rs, hang)
}

// TestTakeDeadHolder: a holder killed by SIGKILL leaves its sockets, which
// refuse every connection; a successor is told at once that it is gone,
// for the shared offer and an interface's alike, not left to ask again
// until its wait runs out as for a holder about to listen. A new holder
// offers on the same sockets.
func TestTakeDeadHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	o, r := pipeOffer(t, "eth1", 7)
	shared, rs := pipeOffer(t, "", 0)
	shared.Key = SharedKey
	pid, errs, err := Spawn(dir, time.Hour, []Offer{shared, o})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, errs)
	closeAll(o.FDs)
	closeAll(shared.FDs)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	closedBy(t, r, hang)
	closedBy(t, rs, hang)
	require.True(t, Offered(dir, SharedKey), "the dead holder's socket is left")
	require.True(t, Offered(dir, o.Key), "the dead holder's socket is left")

	got, err := TakeShared(dir, hang)
	require.Nil(t, got)
	require.ErrorIs(t, err, ErrHolderGone)
	taken, err := Take(dir, o.Key, []Key{o.Key}, hang)
	require.Nil(t, taken)
	require.ErrorIs(t, err, ErrHolderGone)

	next, r2 := pipeOffer(t, "eth1", 7)
	h, errs := NewHolder(dir, time.Hour, []Offer{next}, &logger{})
	require.NoError(t, errs[0], "a new holder offers on the socket left")
	done := make(chan struct{})
	go func() { h.Wait(nil); close(done) }()
	taken, err = Take(dir, o.Key, []Key{o.Key}, hang)
	require.NoError(t, err)
	require.NotNil(t, taken)
	closeAll(taken.FDs)
	taken.Accept()
	<-done
	closedBy(t, r2, hang)
	require.False(t, Offered(dir, o.Key), "taken over: nothing left")
	_, err = os.Stat(lockPath(socketPath(dir, o.Key)))
	require.ErrorIs(t, err, os.ErrNotExist, "the lock file goes with the socket")
}

// TestTakeHolderAboutToListen: a socket bound and not listened on yet by a
// holder that lives (holds its lock) is not taken for a dead holder's: the
// successor finds nothing offered within its wait, and no error.
func TestTakeHolderAboutToListen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h")
	require.NoError(t, ensureDir(dir))
	path := socketPath(dir, SharedKey)
	lock, err := lockSocket(path)
	require.NoError(t, err)
	defer unlockSocket(path, lock)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Bind(fd, &unix.SockaddrUnix{Name: path}))

	got, err := TakeShared(dir, 50*time.Millisecond)
	require.NoError(t, err)
	require.Nil(t, got)
	_, err = lockSocket(path)
	require.EqualError(t, err, "offer on "+path+": another handover process already offers this interface")
}
