//go:build unix

package pcapng

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testns"
)

// record is a frame as a reader of the capture sees it.
type record struct {
	ts      time.Time
	data    []byte
	origLen int
}

// readBack converts the capture to pcap with tshark, an independent
// reader, and returns its frames.
func readBack(t *testing.T, path string) []record {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
			t.Fatal("tshark is not installed (apt-get install tshark): CI reads the capture back with it")
		}
		t.Skip("tshark is not installed (apt-get install tshark)")
	}
	out := filepath.Join(t.TempDir(), "out.pcap")
	cmd := exec.Command("tshark", "-r", path, "-F", "nsecpcap", "-w", out)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b), 24)
	// tshark keeps nanosecond stamps in pcap's nanosecond variant.
	nano := binary.LittleEndian.Uint32(b) == 0xa1b23c4d
	var recs []record
	for r := bytes.NewReader(b[24:]); r.Len() > 0; {
		var h [16]byte
		_, err := io.ReadFull(r, h[:])
		require.NoError(t, err)
		sec, frac := binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[4:])
		incl, orig := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
		data := make([]byte, incl)
		_, err = io.ReadFull(r, data)
		require.NoError(t, err)
		ns := int64(frac) * 1000
		if nano {
			ns = int64(frac)
		}
		recs = append(recs, record{time.Unix(int64(sec), ns), data, int(orig)})
	}
	return recs
}

func frame(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i + j)
	}
	return b
}

// TestWriteReadBack: tshark reads back every frame cut to the snap length,
// with its whole length, timestamp and interface; the file is 0600 and ours.
func TestWriteReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	w, err := Create(path, MinSize, 64)
	require.NoError(t, err)
	base := time.Unix(1_700_000_000, 123_456_789)
	var want []record
	for i := 0; i < 20; i++ {
		f := frame(i, 30+i*5)
		iface := []string{"eth1", "eth2"}[i%2]
		require.NoError(t, w.WritePacket(iface, base.Add(time.Duration(i)*time.Millisecond), f, len(f)+1000))
		want = append(want, record{base.Add(time.Duration(i) * time.Millisecond), f[:min(len(f), 64)], len(f) + 1000})
	}
	require.NoError(t, w.Close())
	got := readBack(t, path)
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, want[i].ts.Equal(got[i].ts), "frame %d: %v != %v", i, got[i].ts, want[i].ts)
		require.Equal(t, want[i].data, got[i].data, "frame %d", i)
		require.Equal(t, want[i].origLen, got[i].origLen, "frame %d", i)
	}
	out, err := exec.Command("tshark", "-r", path, "-T", "fields", "-e", "frame.interface_name").Output()
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("eth1\neth2\n", 10), string(out))

	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.Equal(t, uint32(os.Geteuid()), fi.Sys().(*syscall.Stat_t).Uid)
}

// TestRotates: the file rotates to <path>.1 before it would pass the size,
// neither file ever passes it, and every frame is in one of the two.
func TestRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drops.pcapng")
	w, err := Create(path, MinSize, 1500)
	require.NoError(t, err)
	const n = 100 // about a file and a half of 1036-byte blocks
	total := 0
	for i := 0; i < n; i++ {
		f := frame(i, 1000)
		require.NoError(t, w.WritePacket("eth1", time.Unix(int64(i), 0), f, len(f)))
		for _, p := range []string{path, path + ".1"} {
			if fi, err := os.Stat(p); err == nil {
				require.LessOrEqual(t, fi.Size(), int64(MinSize), "%s after frame %d", p, i)
			}
		}
	}
	require.NoError(t, w.Close())
	old, cur := readBack(t, path+".1"), readBack(t, path)
	total = len(old) + len(cur)
	require.NotEmpty(t, old)
	require.Equal(t, n, total)
	require.Equal(t, frame(len(old), 1000), cur[0].data, "the new file starts with the next frame")

	// A restart keeps the last capture as <path>.1.
	w, err = Create(path, MinSize, 1500)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.Len(t, readBack(t, path+".1"), len(cur))
}

// TestCheckPath: paths that cannot be a capture file are refused with the reason.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	theirs := filepath.Join(dir, "theirs")
	require.NoError(t, os.Symlink(filepath.Join(dir, "x"), theirs))
	mine := filepath.Join(dir, "mine")
	require.NoError(t, os.Symlink(filepath.Join(dir, "x"), mine))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Lchown(theirs, 65534, 65534))
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "ok.pcapng"), ""},
		{mine, "is a symbolic link, which the capture is never written through"},
		{"drops.pcapng", "not an absolute path"},
		{filepath.Join(dir, "missing", "x.pcapng"), "which does not exist"},
		{fifo, "not a regular file but a FIFO"},
		{dir, "not a regular file but a directory"},
	} {
		err := CheckPath(c.path)
		if c.want == "" {
			require.NoError(t, err, c.path)
			continue
		}
		require.ErrorContains(t, err, c.want, c.path)
	}
	if os.Geteuid() == 0 {
		require.ErrorContains(t, CheckPath(theirs), "is a symbolic link")
		other := filepath.Join(dir, "other.pcapng")
		require.NoError(t, os.WriteFile(other, nil, 0o600))
		require.NoError(t, os.Chown(other, 65534, 65534))
		require.ErrorContains(t, CheckPath(other), "is a file owned by uid 65534, not this user")
	}
}

// TestCheckPathSharedDirectory: a directory group or other users may write
// is refused, naming it and the fix, unless it is sticky.
func TestCheckPathSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{
		{0o700, ""},
		{0o755, ""},
		{0o775, "is in " + dir + ", which group or other users may write (mode 0775)"},
		{0o777, "run chmod go-w " + dir},
		{os.ModeSticky | 0o777, ""},
	} {
		require.NoError(t, os.Chmod(dir, c.mode))
		path := filepath.Join(dir, "drops.pcapng")
		err := CheckPath(path)
		w, cerr := Create(path, MinSize, 64)
		if c.want == "" {
			require.NoError(t, err, "%o", c.mode)
			require.NoError(t, cerr, "%o", c.mode)
			require.NoError(t, w.Close())
			continue
		}
		require.ErrorContains(t, err, c.want, "%o", c.mode)
		require.ErrorContains(t, cerr, c.want, "%o", c.mode)
	}
}

// victim is a file the capture must never touch, and a check that it was not.
func victim(t *testing.T) (string, func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shadow")
	require.NoError(t, os.WriteFile(path, []byte("root:secret\n"), 0o640))
	require.NoError(t, os.Chmod(path, 0o640))
	return path, func() {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "root:secret\n", string(b))
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	}
}

// TestSymlinkSwappedAfterCheck: a link put at the capture path after the
// check is refused at start, and the file it points to is left as it was.
func TestSymlinkSwappedAfterCheck(t *testing.T) {
	target, untouched := victim(t)
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	require.NoError(t, CheckPath(path))
	require.NoError(t, os.Symlink(target, path))
	_, err := Create(path, MinSize, 64)
	require.ErrorContains(t, err, "is a symbolic link")
	untouched()
}

// TestSymlinkSwappedWhileWriting: a link swapped in for the file being
// written is refused at the rotation (the writer reports it and stops), and
// the file it points to is left as it was.
func TestSymlinkSwappedWhileWriting(t *testing.T) {
	target, untouched := victim(t)
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	w, err := Create(path, MinSize, 1500)
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(target, path))
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		werr = w.WritePacket("eth1", time.Unix(int64(i), 0), frame(i, 1000), 1000)
	}
	require.ErrorContains(t, werr, "was replaced since it was created, by someone else; it is left alone")
	require.ErrorContains(t, w.WritePacket("eth1", time.Now(), frame(0, 100), 100), "closed")
	untouched()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSymlink, "the link stays where it was put")
}

// TestLinkAppearsAtRotation: a link put at the path between the rotation's
// rename and the new file's creation is not followed: the creation fails.
func TestLinkAppearsAtRotation(t *testing.T) {
	target, untouched := victim(t)
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	w, err := Create(path, MinSize, 1500)
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.moveCurrent())
	require.NoError(t, os.Symlink(target, path))
	_, err = w.createFile()
	require.ErrorContains(t, err, "appeared since it was moved away")
	untouched()
}

// TestCheckPathNotWritable: a directory the user may not write is refused.
// Root may write anywhere, so the check runs as nobody, in a copy of this
// test binary.
func TestCheckPathNotWritable(t *testing.T) {
	if p := os.Getenv("PCAPNG_CHECK_PATH"); p != "" {
		fmt.Printf("RESULT %v\n", CheckPath(p))
		return
	}
	testns.RequirePrivileged(t) // root, to run the check as another user
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "pcapng.test")
	exe, err := os.ReadFile("/proc/self/exe")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, exe, 0o755))
	ro := filepath.Join(dir, "ro")
	require.NoError(t, os.Mkdir(ro, 0o755)) // root's, not nobody's to write
	for _, d := range []string{filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		// t.TempDir's parents are 0700: nobody must reach the copy.
		fi, err := os.Stat(d)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o011))
			t.Cleanup(func() { os.Chmod(d, fi.Mode().Perm()) })
		}
	}
	cmd := exec.Command(bin, "-test.run", "^TestCheckPathNotWritable$")
	cmd.Env = append(os.Environ(), "PCAPNG_CHECK_PATH="+filepath.Join(ro, "drops.pcapng"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "RESULT is in "+ro+", where this user (uid 65534) may not create files")
}
