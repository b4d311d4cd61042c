//go:build unix

package pcapng

import (
	"bufio"
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

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
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
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 64, Files: 1})
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
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 1})
	require.NoError(t, err)
	const n = 100 // about a file and a half of 1036-byte blocks
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
	require.NotEmpty(t, old)
	require.Equal(t, n, len(old)+len(cur))
	require.Equal(t, frame(len(old), 1000), cur[0].data, "the new file starts with the next frame")
}

// TestKeepsFiles: with Files = 3 the rotated files move up to <path>.3 and
// the oldest goes; the four files hold the last frames, in order.
func TestKeepsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drops.pcapng")
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 3})
	require.NoError(t, err)
	const n = 400 // six files and more of 62 frames
	for i := 0; i < n; i++ {
		require.NoError(t, w.WritePacket("eth1", time.Unix(int64(i), 0), frame(i, 1000), 1000))
	}
	require.NoError(t, w.Close())
	for _, p := range []string{path + ".1", path + ".2", path + ".3"} {
		require.FileExists(t, p, "capture_files rotated files kept")
	}
	_, err = os.Stat(path + ".4")
	require.ErrorIs(t, err, os.ErrNotExist, "no file past capture_files")
	var all []record
	for _, p := range []string{path + ".3", path + ".2", path + ".1", path} {
		recs := readBack(t, p)
		require.NotEmpty(t, recs, p)
		all = append(all, recs...)
	}
	require.Greater(t, len(all), 3*62)
	for i, r := range all {
		require.Equal(t, frame(n-len(all)+i, 1000), r.data, "frame %d of the last %d", i, len(all))
	}
}

// TestContinuesAcrossRestarts: a capture opened again is continued, not
// rotated: three runs leave one file with every frame, each on the
// interface it was written for, declared once (tshark 4.0 names the interfaces of every
// section after the first's, so the last section is continued).
func TestContinuesAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	var want [][]byte
	for run := 0; run < 3; run++ {
		w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
		require.NoError(t, err)
		for i := 0; i < 5; i++ {
			f := frame(run*10+i, 100)
			require.NoError(t, w.WritePacket(fmt.Sprintf("eth%d", run%2), time.Unix(int64(run*10+i), 0), f, len(f)))
			want = append(want, f)
		}
		require.NoError(t, w.Close())
	}
	_, err := os.Stat(path + ".1")
	require.ErrorIs(t, err, os.ErrNotExist, "a restart does not rotate")
	got := readBack(t, path)
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i], got[i].data, "frame %d", i)
	}
	out, err := exec.Command("tshark", "-r", path, "-T", "fields", "-e", "frame.interface_id", "-e", "frame.interface_name").Output()
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("0\teth0\n", 5)+strings.Repeat("1\teth1\n", 5)+strings.Repeat("0\teth0\n", 5), string(out),
		"an interface declared in an earlier run is not declared again")
}

// TestContinuesAfterCrash: a capture cut short in a block (a crash while
// writing) is cut back to its last whole block and continued.
func TestContinuesAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		require.NoError(t, w.WritePacket("eth1", time.Unix(int64(i), 0), frame(i, 100), 100))
	}
	require.NoError(t, w.Close())
	whole, err := os.ReadFile(path)
	require.NoError(t, err)
	half := appendEPB(nil, 0, time.Unix(9, 0), frame(9, 100), 100)
	require.NoError(t, os.WriteFile(path, append(whole, half[:70]...), 0o600))

	w, err = Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
	require.NoError(t, err)
	require.NoError(t, w.WritePacket("eth1", time.Unix(5, 0), frame(5, 100), 100))
	require.NoError(t, w.Close())
	got := readBack(t, path)
	require.Len(t, got, 6)
	for i, r := range got {
		require.Equal(t, frame(i, 100), r.data, "frame %d", i)
	}
}

// TestNotPcapngRotated: a file of this user's at the path that is not a
// pcapng one is kept as <path>.1, not written after.
func TestNotPcapngRotated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	require.NoError(t, os.WriteFile(path, []byte("notes\n"), 0o600))
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
	require.NoError(t, err)
	require.NoError(t, w.WritePacket("eth1", time.Unix(1, 0), frame(1, 100), 100))
	require.NoError(t, w.Close())
	b, err := os.ReadFile(path + ".1")
	require.NoError(t, err)
	require.Equal(t, "notes\n", string(b))
	require.Len(t, readBack(t, path), 1)
}

// TestOneWriterAtATime: a capture being written is not written by a second
// writer (an instance still stopping, or another one) until the first is done.
func TestOneWriterAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	o := Options{MaxSize: MinSize, Snaplen: 1500, Files: 2}
	w, err := Open(path, o)
	require.NoError(t, err)
	_, err = Open(path, o)
	require.ErrorContains(t, err, path+" is being written by another process")
	require.NoError(t, w.Close())
	w, err = Open(path, o)
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

// TestOpenRefusesWhatIsNotOurs: what is at the path and is not a file of
// this user's is refused when the capture is opened, and left alone.
func TestOpenRefusesWhatIsNotOurs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "x"), link))
	cases := []struct{ path, want string }{
		{link, "is a symbolic link, which the capture is never written through"},
		{fifo, "not a regular file but a FIFO"},
		{dir, "not a regular file but a directory"},
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other.pcapng")
		require.NoError(t, os.WriteFile(other, nil, 0o600))
		require.NoError(t, os.Chown(other, 65534, 65534))
		cases = append(cases, struct{ path, want string }{other, "is a file owned by uid 65534, not this user"})
	}
	for _, c := range cases {
		_, err := Open(c.path, Options{MaxSize: MinSize, Snaplen: 64, Files: 2})
		require.ErrorContains(t, err, c.want, c.path)
	}
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSymlink)
}

// TestCheckPath: paths that cannot be a capture file are refused with the
// reason; what is at the path is for Open to find.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "ok.pcapng"), ""},
		{fifo, ""},
		{"drops.pcapng", "not an absolute path"},
		{filepath.Join(dir, "missing", "x.pcapng"), "which does not exist"},
		{filepath.Join(fifo, "x.pcapng"), "which is not a directory"},
	} {
		err := CheckPath(c.path)
		if c.want == "" {
			require.NoError(t, err, c.path)
			continue
		}
		require.ErrorContains(t, err, c.want, c.path)
	}
}

// TestCheckPathSharedDirectory: a directory group or other users may
// write, sticky or not, or that another user owns, is refused, naming it and
// the fix; the writer itself refuses one that is not sticky.
func TestCheckPathSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drops.pcapng")
	const fix = "choose a directory only the service user may write"
	for _, c := range []struct {
		mode       os.FileMode
		want, open string
	}{
		{0o700, "", ""},
		{0o755, "", ""},
		{0o775, "is in " + dir + ", which other users may write (mode 0775): one could create the capture's files there first and stop it; " + fix, "run chmod go-w " + dir},
		{0o777, "(mode 0777)", "run chmod go-w " + dir},
		{os.ModeSticky | 0o777, "is in " + dir + ", which other users may write (mode 1777)", ""},
		{os.ModeSticky | 0o770, "(mode 1770)", ""},
	} {
		require.NoError(t, os.Chmod(dir, c.mode))
		if c.want == "" {
			require.NoError(t, CheckPath(path), "%o", c.mode)
		} else {
			require.ErrorContains(t, CheckPath(path), c.want, "%o", c.mode)
		}
		w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 64, Files: 2})
		if c.open == "" {
			require.NoError(t, err, "%o", c.mode)
			require.NoError(t, w.Close())
			continue
		}
		require.ErrorContains(t, err, c.open, "%o", c.mode)
	}
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chmod(dir, 0o755))
		require.NoError(t, os.Chown(dir, 65534, 65534))
		require.ErrorContains(t, CheckPath(path), "is in "+dir+", owned by uid 65534 (nobody), who may create the capture's files there first and stop it; "+fix)
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
	_, err := Open(path, Options{MaxSize: MinSize, Snaplen: 64, Files: 2})
	require.ErrorContains(t, err, "is a symbolic link")
	untouched()
}

// TestSymlinkSwappedWhileWriting: a link swapped in for the file being
// written is refused at the rotation, again at every try, and the file it
// points to is left as it was.
func TestSymlinkSwappedWhileWriting(t *testing.T) {
	target, untouched := victim(t)
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(target, path))
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		werr = w.WritePacket("eth1", time.Unix(int64(i), 0), frame(i, 1000), 1000)
	}
	require.ErrorContains(t, werr, "was replaced since it was opened, by someone else; it is left alone")
	require.ErrorContains(t, w.WritePacket("eth1", time.Now(), frame(0, 1000), 1000), "it is left alone")
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
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.moveFiles())
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

// smallDisk mounts a tmpfs of size bytes for the test, unmounted at its end.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	testns.RequirePrivileged(t) // root, to mount
	dir := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)))
	t.Cleanup(func() { require.NoError(t, unix.Unmount(dir, unix.MNT_DETACH)) })
	return dir
}

// TestDiskFull: a write the disk has no room for leaves no part of its
// block in the file: tshark reads every frame written before and after,
// once there is room again.
func TestDiskFull(t *testing.T) {
	dir := smallDisk(t, 32<<10)
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 16<<10), 0o600))
	path := filepath.Join(dir, "drops.pcapng")
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 2})
	require.NoError(t, err)
	defer w.Close()
	var written [][]byte
	failed := 0
	for i := 0; i < 40; i++ {
		f := frame(i, 1000)
		if err := w.WritePacket("eth1", time.Unix(int64(i), 0), f, len(f)); err != nil {
			require.ErrorIs(t, err, unix.ENOSPC)
			failed++
			continue
		}
		written = append(written, f)
	}
	require.NotZero(t, failed, "the disk filled up")
	require.NoError(t, os.Remove(filler))
	for i := 40; i < 50; i++ {
		f := frame(i, 1000)
		require.NoError(t, w.WritePacket("eth1", time.Unix(int64(i), 0), f, len(f)), "frame %d, with room again", i)
		written = append(written, f)
	}
	got := readBack(t, path)
	require.Len(t, got, len(written))
	for i := range written {
		require.Equal(t, written[i], got[i].data, "frame %d", i)
	}
}

// TestRotationBlockedByAnotherUser: another user's <path>.1 in a sticky
// directory blocks the rotation of a writer that is not root (rename gives
// EPERM there); the writer keeps its file, reports why at every try, and
// writes every frame once the file is gone. Run as uid 4242 in a copy of
// this test binary, the obstruction nobody's.
func TestRotationBlockedByAnotherUser(t *testing.T) {
	if p := os.Getenv("PCAPNG_BLOCKED_PATH"); p != "" {
		blockedWriter(p)
		return
	}
	testns.RequirePrivileged(t) // root, to act as two other users
	bin, dir := asOtherUsers(t)
	shared := filepath.Join(dir, "shared")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, os.ModeSticky|0o777))
	path := filepath.Join(shared, "drops.pcapng")
	require.NoError(t, exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "touch", path+".1").Run())

	cmd := exec.Command(bin, "-test.run", "^TestRotationBlockedByAnotherUser$")
	cmd.Env = append(os.Environ(), "PCAPNG_BLOCKED_PATH="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outPipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, testproc.Tie(cmd).Start())
	out := bufio.NewReader(outPipe)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	var ok, failed int
	var first, last string
	_, err = fmt.Sscanf(line, "BLOCKED %d %d %q %q", &ok, &failed, &first, &last)
	require.NoError(t, err, line)
	require.NotZero(t, failed)
	require.Contains(t, first, "rotate capture file: "+path+".1 is a file owned by uid 65534, not this user (uid 4242); remove it")
	require.Equal(t, first, last, "every try says why, not that the file is closed")
	require.NoError(t, os.Remove(path+".1"))
	_, err = in.Write([]byte("go\n"))
	require.NoError(t, err)
	rest, err := io.ReadAll(out)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), "%s", rest)
	require.Contains(t, string(rest), "PASSED 100")
	got := append(readBack(t, path+".2"), readBack(t, path+".1")...)
	got = append(got, readBack(t, path)...)
	require.Equal(t, ok+100, len(got), "the frames written before the obstruction and every one after it went")
	for i := 0; i < 100; i++ {
		require.True(t, bytes.Equal(frame(1000+i, 1000), got[ok+i].data), "frame %d after the obstruction went", i)
	}
}

// blockedWriter is the writer of TestRotationBlockedByAnotherUser.
func blockedWriter(path string) {
	w, err := Open(path, Options{MaxSize: MinSize, Snaplen: 1500, Files: 3})
	if err != nil {
		fmt.Println("OPEN", err)
		os.Exit(1)
	}
	var ok, failed int
	var first, last string
	for i := 0; i < 100; i++ {
		if err := w.WritePacket("eth1", time.Unix(int64(i), 0), frame(i, 1000), 1000); err != nil {
			if failed == 0 {
				first = err.Error()
			}
			failed++
			last = err.Error()
			continue
		}
		ok++
	}
	fmt.Printf("BLOCKED %d %d %q %q\n", ok, failed, first, last)
	bufio.NewReader(os.Stdin).ReadString('\n')
	for i := 0; i < 100; i++ {
		if err := w.WritePacket("eth1", time.Unix(int64(1000+i), 0), frame(1000+i, 1000), 1000); err != nil {
			fmt.Println("WRITE", i, err)
			os.Exit(1)
		}
	}
	w.Close()
	fmt.Println("PASSED 100")
}

// asOtherUsers copies this test binary where other users may run it, in a
// directory they may reach, and returns both.
func asOtherUsers(t *testing.T) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	bin = filepath.Join(dir, "pcapng.test")
	exe, err := os.ReadFile("/proc/self/exe")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, exe, 0o755))
	for _, d := range []string{filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		// t.TempDir's parents are 0700: the other users must reach the copy.
		fi, err := os.Stat(d)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o011))
			t.Cleanup(func() { os.Chmod(d, fi.Mode().Perm()) })
		}
	}
	return bin, dir
}
