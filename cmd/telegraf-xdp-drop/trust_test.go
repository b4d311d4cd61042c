//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestConfigTrust: a config that someone other than root and the running
// user could change, directly or through a directory above it, is refused
// with the command that fixes it; a sticky directory such as /tmp is fine.
func TestConfigTrust(t *testing.T) {
	testns.RequirePrivileged(t) // chown to another user
	me := os.Getuid()
	dir := t.TempDir()
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[[inputs.xdp_drop]]\n"), 0o644))
	require.NoError(t, checkConfigTrust(conf, me))

	require.NoError(t, os.Chmod(conf, 0o664))
	err := checkConfigTrust(conf, me)
	require.ErrorContains(t, err, conf+" is writable by its group (mode 0664)")
	require.ErrorContains(t, err, "chmod go-w "+conf)
	require.NoError(t, os.Chmod(conf, 0o646))
	require.ErrorContains(t, checkConfigTrust(conf, me), "writable by all users")
	require.NoError(t, os.Chmod(conf, 0o644))

	require.NoError(t, os.Chown(conf, 4242, 4242))
	err = checkConfigTrust(conf, me)
	require.ErrorContains(t, err, conf+" is owned by uid 4242")
	require.ErrorContains(t, err, "chown root "+conf)
	require.NoError(t, checkConfigTrust(conf, 4242), "the running user may own it")
	require.NoError(t, os.Chown(conf, 0, 0))

	link := filepath.Join(dir, "link.conf")
	require.NoError(t, os.Symlink(conf, link))
	require.NoError(t, checkConfigTrust(link, me))

	// A link in a directory others may write: they could point it elsewhere.
	open := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chown(open, 4242, 4242))
	shared := filepath.Join(open, "xdp_drop.conf")
	require.NoError(t, os.Symlink(conf, shared))
	err = checkConfigTrust(shared, me)
	require.ErrorContains(t, err, open+" is owned by uid 4242")
	require.NoError(t, os.Chown(open, 0, 0))
	require.NoError(t, checkConfigTrust(shared, me))
	require.NoError(t, os.Lchown(shared, 4242, 4242))
	require.ErrorContains(t, checkConfigTrust(shared, me), shared+" is a symbolic link owned by uid 4242")
	// ... and a link to that link.
	require.NoError(t, os.Lchown(shared, 0, 0))
	require.NoError(t, os.Chmod(open, 0o777))
	relay := filepath.Join(dir, "relay.conf")
	require.NoError(t, os.Symlink(shared, relay))
	err = checkConfigTrust(relay, me)
	require.ErrorContains(t, err, open+" is writable by its group and all users (mode 0777)")
	require.ErrorContains(t, err, "(reached through the symbolic link "+relay+")")

	// A link to a directory on the way counts as much as one to the file.
	confDir := filepath.Join(dir, "conf-dir")
	require.NoError(t, os.Symlink(dir, confDir))
	require.NoError(t, checkConfigTrust(filepath.Join(confDir, "xdp_drop.conf"), me))
	require.NoError(t, os.Lchown(confDir, 4242, 4242))
	err = checkConfigTrust(filepath.Join(confDir, "xdp_drop.conf"), me)
	require.ErrorContains(t, err, confDir+" is a symbolic link owned by uid 4242")
	require.ErrorContains(t, err, "chown -h root "+confDir)

	require.NoError(t, os.Chmod(dir, 0o777))
	require.ErrorContains(t, checkConfigTrust(conf, me), dir+" is writable by its group and all users (mode 0777)")
	require.NoError(t, os.Chmod(dir, 0o777|os.ModeSticky))
	require.NoError(t, checkConfigTrust(conf, me), "a sticky directory lets no one replace the file")
}

// TestOpenTrustedResolvesAsTheKernel: the walk finds the file the kernel
// would (relative paths, relative and absolute links, .. after a link),
// returns its bytes, and says plainly when the path is not a file.
func TestOpenTrustedResolvesAsTheKernel(t *testing.T) {
	testns.RequirePrivileged(t) // chown to another user
	me := os.Getuid()
	dir := t.TempDir()
	write := func(p, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	write(filepath.Join(dir, "etc", "xdp_drop.conf"), "etc")
	write(filepath.Join(dir, "etc", "deep", "xdp_drop.conf"), "deep")
	require.NoError(t, os.Symlink("etc/deep", filepath.Join(dir, "rel")))
	require.NoError(t, os.Symlink(filepath.Join(dir, "etc", "deep"), filepath.Join(dir, "abs")))
	require.NoError(t, os.Symlink("xdp_drop.conf", filepath.Join(dir, "etc", "same.conf")))
	read := func(path string) string {
		t.Helper()
		f, err := openConfigFile(path, me)
		require.NoError(t, err, path)
		defer f.Close()
		raw := make([]byte, 16)
		n, _ := f.Read(raw)
		return string(raw[:n])
	}
	require.Equal(t, "etc", read(filepath.Join(dir, "etc", "xdp_drop.conf")))
	require.Equal(t, "deep", read(filepath.Join(dir, "rel", "xdp_drop.conf")))
	require.Equal(t, "deep", read(filepath.Join(dir, "abs", "xdp_drop.conf")))
	require.Equal(t, "etc", read(filepath.Join(dir, "etc", "same.conf")))
	require.Equal(t, "etc", read(dir+"/rel/../xdp_drop.conf"), ".. leaves the directory the link led to")
	require.Equal(t, "etc", read(dir+"/abs/../xdp_drop.conf"))
	require.Equal(t, "etc", read(dir+"/./etc//xdp_drop.conf"))
	t.Chdir(filepath.Join(dir, "etc"))
	require.Equal(t, "deep", read("deep/xdp_drop.conf"))
	require.Equal(t, "etc", read("../rel/../xdp_drop.conf"))

	require.NoError(t, os.Symlink("loop-b", filepath.Join(dir, "loop-a")))
	require.NoError(t, os.Symlink("loop-a", filepath.Join(dir, "loop-b")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo.conf"), 0o644))
	for path, want := range map[string]string{
		filepath.Join(dir, "loop-a"):                   "too many levels of symbolic links",
		filepath.Join(dir, "missing", "xdp_drop.conf"): "config: open " + filepath.Join(dir, "missing") + ": no such file or directory",
		dir + "/etc/xdp_drop.conf/x":                   "config: open " + filepath.Join(dir, "etc", "xdp_drop.conf") + ": not a directory",
		filepath.Join(dir, "fifo.conf"):                "config " + filepath.Join(dir, "fifo.conf") + ": not a regular file (a FIFO)",
		filepath.Join(dir, "etc"):                      "config " + filepath.Join(dir, "etc") + ": not a regular file (a directory)",
		filepath.Join(dir, "rel") + "/":                "config " + filepath.Join(dir, "etc", "deep") + ": not a regular file (a directory)",
	} {
		_, err := openConfigFile(path, me)
		require.ErrorContains(t, err, want, path)
	}

	// Whatever is refused on the way says which link led there.
	require.NoError(t, os.Chown(filepath.Join(dir, "etc", "deep", "xdp_drop.conf"), 4242, 4242))
	_, err := openConfigFile(filepath.Join(dir, "rel", "xdp_drop.conf"), me)
	require.ErrorContains(t, err, filepath.Join(dir, "etc", "deep", "xdp_drop.conf")+" is owned by uid 4242")
	require.ErrorContains(t, err, "(reached through the symbolic link "+filepath.Join(dir, "rel")+")")
	var untrusted *untrustedError
	require.ErrorAs(t, err, &untrusted)
}

// checkConfigTrust opens path as the binary does under file capabilities
// running as uid, and returns the refusal, if any.
func checkConfigTrust(path string, uid int) error {
	f, err := openConfigFile(path, uid)
	if err != nil {
		return err
	}
	return f.Close()
}

// TestConfigSymlinkRace: another user owns a directory link on the way to
// the config and flips it between the service's directory and their own
// while the binary starts with its file capabilities, as that service's
// user. No start may read that user's file: the way to the file is resolved
// and checked one component at a time, each opened relative to the one
// before, and the bytes decoded are read from the descriptor checked.
func TestConfigSymlinkRace(t *testing.T) {
	// The binary stops at its config and attaches nothing; it runs in a
	// namespace of its own all the same.
	ns := testns.New(t)
	const service, attacker = 65534, 4242
	bin := capBinary(t)
	base, err := os.MkdirTemp("", "xdp-drop-race")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o777|os.ModeSticky), "as /tmp")

	// Each file holds an unknown option that names it: the binary's error
	// says which file it decoded, and it exits before attaching anything.
	svc := filepath.Join(base, "svc")
	require.NoError(t, os.Mkdir(svc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(svc, "xdp_drop.conf"), []byte("[[inputs.xdp_drop]]\n  from_service = true\n"), 0o644))
	atk := filepath.Join(base, "atk")
	require.NoError(t, os.Mkdir(atk, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(atk, "xdp_drop.conf"), []byte("[[inputs.xdp_drop]]\n  from_attacker = true\n"), 0o644))
	for _, p := range []string{atk, filepath.Join(atk, "xdp_drop.conf")} {
		require.NoError(t, os.Chown(p, attacker, attacker))
	}

	link := filepath.Join(base, "atk-dir")
	flip := func(target string) error {
		next := link + ".next"
		os.Remove(next)
		if err := os.Symlink(target, next); err != nil {
			return err
		}
		if err := os.Lchown(next, attacker, attacker); err != nil {
			return err
		}
		return os.Rename(next, link)
	}
	require.NoError(t, flip(svc))
	stop, flipped := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				flipped <- nil
				return
			default:
			}
			target := svc
			if i%2 == 1 {
				target = atk
			}
			if err := flip(target); err != nil {
				flipped <- err
				return
			}
		}
	}()
	stopFlipping := sync.OnceValue(func() error { close(stop); return <-flipped })
	t.Cleanup(func() { stopFlipping() }) // before base is removed

	const starts = 200
	outcomes := map[string]int{}
	for range starts {
		cmd := exec.Command(bin, "-config", filepath.Join(link, "xdp_drop.conf"), "-poll_interval_disabled")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: service, Gid: service, Groups: []uint32{}}}
		var out binarytest.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, ns.Do(cmd.Start))
		err := cmd.Wait()
		switch text := out.String(); {
		case strings.Contains(text, `unknown option "inputs.xdp_drop.from_attacker"`):
			outcomes["attacker's file"]++
		case strings.Contains(text, `unknown option "inputs.xdp_drop.from_service"`):
			outcomes["service's file"]++
		case strings.Contains(text, "refusing to run with CAP_BPF, CAP_NET_ADMIN: "+link+" is a symbolic link owned by uid 4242"):
			outcomes["refused: the link"]++
		case strings.Contains(text, "refusing to run with CAP_BPF, CAP_NET_ADMIN: "):
			outcomes["refused: other"]++
		default:
			t.Fatalf("unexpected outcome (%v): %s", err, text)
		}
		require.Error(t, err, "every start ends at the config")
	}
	require.NoError(t, stopFlipping())
	t.Logf("%d starts: %v", starts, outcomes)
	require.Zero(t, outcomes["attacker's file"], "starts that decoded the other user's file")
}

// capBinary copies the binary into a directory of its own and gives the
// copy the file capabilities make install grants.
func capBinary(t *testing.T) string {
	t.Helper()
	_, bin := binarytest.CopyForOthers(t, binary, "")
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	return bin
}
