//go:build package && linux

// Package packagetest checks the .deb and .rpm that make package builds, then
// installs the .deb on this machine, runs the installed binary as a member of
// the service group and as nobody, and purges it, leaving the machine as it
// was. Run it with make package-test (root, Debian).
package packagetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/frames"
	"github.com/xdp-drop/xdp_drop/internal/testns"
	"github.com/xdp-drop/xdp_drop/internal/txgen"
)

const (
	pkgName    = "telegraf-xdp-drop"
	installed  = "/usr/bin/telegraf-xdp-drop"
	caps       = "cap_net_admin,cap_perfmon,cap_bpf=ep" // how getcap prints cap_bpf,cap_net_admin,cap_perfmon+ep
	bpffs      = "/sys/fs/bpf"
	pinDir     = "/sys/fs/bpf/xdp_drop"
	svcUser    = "xdpdrop-pkgtest"
	nobody     = 65534
	lockFile   = "/tmp/xdpdrop-package.lock"
	pluginConf = "/etc/telegraf-xdp-drop/xdp_drop.conf"
	execdConf  = "/etc/telegraf/telegraf.d/xdp_drop.conf"
	tmpfiles   = "/usr/lib/tmpfiles.d/telegraf-xdp-drop.conf"
	runDir     = "/run/telegraf-xdp-drop"
	dropinDoc  = "/usr/share/doc/telegraf-xdp-drop/telegraf.service.d-xdp-drop.conf"
)

func group() string {
	if g := os.Getenv("GROUP"); g != "" {
		return g
	}
	return "telegraf"
}

// built returns the one package of the kind make package left in PKGDIR.
func built(t *testing.T, ext string) string {
	t.Helper()
	dir := os.Getenv("PKGDIR")
	require.NotEmpty(t, dir, "PKGDIR must name the directory make package wrote to; run make package-test")
	found, err := filepath.Glob(filepath.Join(dir, pkgName+"*."+ext))
	require.NoError(t, err)
	require.Len(t, found, 1, "exactly one .%s in %s", ext, dir)
	return found[0]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
	return string(out)
}

// TestDebContents: modes, owners, conffiles, dependencies and scripts of the .deb.
func TestDebContents(t *testing.T) {
	deb := built(t, "deb")
	list := run(t, "dpkg-deb", "-c", deb)
	t.Logf("dpkg-deb -c %s:\n%s", deb, list)
	want := map[string]string{
		"./usr/bin/telegraf-xdp-drop":                                        "-rwxr-x--- root/root",
		"./etc/telegraf-xdp-drop/xdp_drop.conf":                              "-rw-r--r-- root/root",
		"./etc/telegraf/telegraf.d/xdp_drop.conf":                            "-rw-r--r-- root/root",
		"./usr/lib/tmpfiles.d/telegraf-xdp-drop.conf":                        "-rw-r--r-- root/root",
		"./usr/share/doc/telegraf-xdp-drop/telegraf.service.d-xdp-drop.conf": "-rw-r--r-- root/root",
		"./usr/share/doc/telegraf-xdp-drop/README.md":                        "-rw-r--r-- root/root",
		"./usr/share/lintian/overrides/telegraf-xdp-drop":                    "-rw-r--r-- root/root",
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		files[f[len(f)-1]] = f[0] + " " + f[1]
	}
	require.Equal(t, want, files, "the files the .deb holds, with mode and owner")

	info := run(t, "dpkg-deb", "-I", deb)
	require.Regexp(t, `(?m)^ Depends: libc6 \(>= 2\.\d+\), libcap2-bin, passwd$`, info)
	require.Regexp(t, `(?m)^ *\d+ bytes, +\d+ lines +\* +postinst `, info)
	require.Regexp(t, `(?m)^ *\d+ bytes, +\d+ lines +\* +postrm `, info)
	ctrl := t.TempDir()
	run(t, "dpkg-deb", "-e", deb, ctrl)
	conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	require.NoError(t, err)
	require.Equal(t, pluginConf+"\n"+execdConf+"\n", string(conffiles))
	postinst, err := os.ReadFile(filepath.Join(ctrl, "postinst"))
	require.NoError(t, err)
	checkPostinst(t, string(postinst))
	execd := run(t, "sh", "-c", fmt.Sprintf("dpkg-deb --fsys-tarfile %s | tar -xOf - .%s", deb, execdConf))
	require.Contains(t, execd, `command = ["/usr/bin/telegraf-xdp-drop", "-config", "/etc/telegraf-xdp-drop/xdp_drop.conf", "-poll_interval_disabled"]`)
	tmp := run(t, "sh", "-c", fmt.Sprintf("dpkg-deb --fsys-tarfile %s | tar -xOf - .%s", deb, tmpfiles))
	require.Contains(t, tmp, "d /sys/fs/bpf/xdp_drop 0770 root "+group()+" -")
	require.Contains(t, tmp, "d /run/telegraf-xdp-drop 0770 root "+group()+" -")
}

// TestDebLintian: lintian finds nothing but what is known and documented:
// no copyright file and no changelog (the project has not chosen a license
// for its Go code yet). Deliberate departures (the 0750 binary) carry
// overrides in the package.
func TestDebLintian(t *testing.T) {
	deb := built(t, "deb")
	_, err := exec.LookPath("lintian")
	require.NoError(t, err, "lintian is needed (Debian package lintian)")
	out, err := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("lintian: %v", err)
	}
	t.Logf("lintian %s:\n%s", deb, out)
	known := regexp.MustCompile(`^E: telegraf-xdp-drop: (no-copyright-file|no-changelog usr/share/doc/telegraf-xdp-drop/changelog.gz \(native package\))$`)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "running with root privileges") || line == "" {
			continue
		}
		require.Regexp(t, known, line, "a lintian finding that is not known")
	}
}

// TestRpmContents: the same for the .rpm.
func TestRpmContents(t *testing.T) {
	rpm := built(t, "rpm")
	list := run(t, "rpm", "-qlvp", rpm)
	t.Logf("rpm -qlvp %s:\n%s", rpm, list)
	require.Regexp(t, `(?m)^-rwxr-x--- +1 root +root +\d+ .* /usr/bin/telegraf-xdp-drop$`, list)
	require.Regexp(t, `(?m)^-rw-r--r-- +1 root +root +\d+ .* /usr/lib/tmpfiles.d/telegraf-xdp-drop.conf$`, list)
	require.Equal(t, pluginConf+"\n"+execdConf+"\n", run(t, "rpm", "-qp", "--configfiles", rpm))
	requires := run(t, "rpm", "-qpR", rpm)
	require.Regexp(t, `(?m)^glibc >= 2\.\d+$`, requires)
	require.Contains(t, requires, "libcap")
	require.Contains(t, requires, "shadow-utils")
	scripts := run(t, "rpm", "-qp", "--scripts", rpm)
	require.Contains(t, scripts, "postinstall scriptlet")
	require.Contains(t, scripts, "postuninstall scriptlet")
	checkPostinst(t, scripts)
}

func checkPostinst(t *testing.T, script string) {
	t.Helper()
	require.Contains(t, script, "GROUP="+group()+"\n")
	require.Contains(t, script, "CAPS=cap_bpf,cap_net_admin,cap_perfmon+ep\n")
	// chown clears file capabilities: the group must be set before them.
	chown := strings.Index(script, `chown root:"$GROUP" "$BIN"`)
	setcap := strings.Index(script, `setcap "$CAPS" "$BIN"`)
	require.True(t, chown >= 0 && setcap > chown, "postinst sets the group, then the capabilities:\n%s", script)
}

// TestInstalledPackage installs the .deb, checks what it set up, runs the
// installed binary as a member of the service group (attach, pin_path,
// counters across a restart) and as nobody (refused, nothing attached), then
// purges it and checks the machine is as it was.
func TestInstalledPackage(t *testing.T) {
	testns.RequirePrivileged(t)
	deb := built(t, "deb")
	lock := takeLock(t)
	defer lock.Close()
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkgName).Output(); err == nil && strings.Contains(string(out), "installed") {
		t.Fatalf("%s is installed on this machine (%s); this test installs and purges it: remove it first", pkgName, out)
	}
	_, err := os.Stat(pinDir)
	require.ErrorIs(t, err, os.ErrNotExist, "%s exists already: not this test's to create and remove", pinDir)
	bpffsMode := modeOf(t, bpffs)
	groupExisted := exec.Command("getent", "group", group()).Run() == nil
	t.Cleanup(func() {
		if !groupExisted {
			if out, err := exec.Command("groupdel", group()).CombinedOutput(); err != nil {
				t.Errorf("groupdel %s (created by the package for this test): %v: %s", group(), err, out)
			}
		}
		if m := modeOf(t, bpffs); m != bpffsMode {
			t.Errorf("%s is %04o after the test, was %04o: restoring", bpffs, m, bpffsMode)
			os.Chmod(bpffs, bpffsMode)
		}
	})

	out := dpkg(t, "-i", deb)
	t.Logf("dpkg -i %s:\n%s", deb, out)
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkgName).Output(); err == nil && !strings.Contains(string(out), "not-installed") {
			os.RemoveAll(filepath.Join(pinDir, testns.Dev))
			dpkg(t, "--purge", pkgName)
		}
	})
	if !groupExisted {
		require.Contains(t, out, "created the system group "+group())
	}

	ls := run(t, "ls", "-l", installed)
	getcap := run(t, "getcap", installed)
	t.Logf("ls -l %s\n%s", installed, ls)
	t.Logf("getcap %s\n%s", installed, getcap)
	require.Regexp(t, `^-rwxr-x--- 1 root `+regexp.QuoteMeta(group())+` `, ls)
	require.Equal(t, installed+" "+caps+"\n", getcap)
	require.Equal(t, os.FileMode(0o1711), modeOf(t, bpffs)&0o7777, "tmpfiles lets the service user traverse %s", bpffs)
	fi, err := os.Stat(pinDir)
	require.NoError(t, err, "tmpfiles creates the pin directory")
	require.Equal(t, os.FileMode(0o770), fi.Mode().Perm())
	require.Equal(t, gid(t, group()), fi.Sys().(*syscall.Stat_t).Gid)

	fi, err = os.Stat(runDir)
	require.NoError(t, err, "the package creates the handover directory")
	require.Equal(t, os.FileMode(0o770), fi.Mode().Perm())
	require.Equal(t, gid(t, group()), fi.Sys().(*syscall.Stat_t).Gid)

	run(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--no-user-group", "--gid", group(), svcUser)
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", svcUser).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", svcUser, err, out)
		}
	})

	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	// handover_timeout = "0s": a handover process would hold the service
	// user for 10 s after each run, and userdel refuses a user in use.
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n  pin_path = %q\n  handover_timeout = \"0s\"\n", testns.Dev, pinDir))
	// nsenter enters only the network namespace (ip netns exec would mount
	// a new /sys, hiding the BPF filesystem), and runuser switches user the
	// way a service manager does. (setpriv keeps root's capabilities until
	// exec, so the kernel's exec permission check would still pass.)
	as := func(user string, args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns.Name, "--", "runuser", "-u", user, "--", installed}, args...)...)
	}

	t.Run("nobody is refused", func(t *testing.T) {
		cmd := as("nobody", "-config", conf, "-poll_interval_disabled")
		out, err := cmd.CombinedOutput()
		t.Logf("%s\n%s(%v)", testns.Cmdline(cmd), out, err)
		require.Error(t, err)
		require.Contains(t, string(out), "Permission denied")
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Zero(t, id, "nobody attached nothing")
	})

	t.Run("service user attaches and pins", func(t *testing.T) {
		gen, err := txgen.New()
		require.NoError(t, err)
		defer gen.Close()
		udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
		send := func(n int) {
			require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, udp, n) }))
		}
		want := 0
		for i, n := range []int{50, 30} {
			p := start(t, as(svcUser, "-config", conf, "-poll_interval_disabled"))
			p.waitLine(t, "xdp_drop_link,interface="+testns.Dev+",mode=native attached=true")
			send(n)
			want += n
			p.waitLine(t, fmt.Sprintf("xdp_drop,action=drop,family=ipv4,interface=%s,protocol=udp packets=%di", testns.Dev, want))
			require.NotContains(t, p.stderr.String(), "E! ")
			p.stop(t)
			if i == 0 {
				t.Logf("pins after the first run:\n%s", run(t, "ls", "-lR", pinDir))
			}
		}
	})

	// Reinstalling (as an upgrade does) unpacks a binary without group or
	// capabilities; the post-install script restores both.
	dpkg(t, "-i", deb)
	require.Regexp(t, `^-rwxr-x--- 1 root `+regexp.QuoteMeta(group())+` `, run(t, "ls", "-l", installed))
	require.Equal(t, installed+" "+caps+"\n", run(t, "getcap", installed))

	// Removing leaves the service user's pins, and says how to release them.
	out = dpkg(t, "--remove", pkgName)
	t.Logf("dpkg --remove %s:\n%s", pkgName, out)
	require.Contains(t, out, pinDir+" still holds pins (counters, or attachments kept with keep_attached), left in place; rm -r "+pinDir+" releases them")
	_, err = os.Stat(filepath.Join(pinDir, testns.Dev))
	require.NoError(t, err, "the pins stay")
	require.NoError(t, os.RemoveAll(filepath.Join(pinDir, testns.Dev)))
	dpkg(t, "--purge", pkgName)
	for _, p := range []string{installed, pluginConf, execdConf, tmpfiles, dropinDoc, pinDir, runDir, "/var/lib/telegraf-xdp-drop"} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s after purge", p)
	}
	require.Equal(t, bpffsMode, modeOf(t, bpffs), "purge restores the mode of %s", bpffs)
}

// takeLock serialises the tests that install the package on this machine.
func takeLock(t *testing.T) *os.File {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	return f
}

// dpkg runs dpkg, waiting while another dpkg or apt holds its lock.
func dpkg(t *testing.T, args ...string) string {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err == nil {
			return string(out)
		}
		if !strings.Contains(string(out), "lock") || time.Now().After(deadline) {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		time.Sleep(2 * time.Second)
	}
}

func modeOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return os.FileMode(st.Mode & 0o7777)
}

func gid(t *testing.T, name string) uint32 {
	t.Helper()
	var id uint32
	_, err := fmt.Sscanf(strings.Split(run(t, "getent", "group", name), ":")[2], "%d", &id)
	require.NoError(t, err)
	return id
}

// writeConfig writes a config the service user can read and only root can write.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "xdpdrop-pkgtest")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	path := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// proc is the installed binary running in the test namespace.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	done   chan error
}

func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, lines: make(chan string, 256), stderr: &syncBuffer{}, done: make(chan error, 1)}
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// waitLine asks for gathers until a line starts with prefix; a bound that
// only a hang reaches.
func (p *proc) waitLine(t *testing.T, prefix string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			require.True(t, ok, "stdout closed before %q; stderr: %s", prefix, p.stderr)
			if strings.HasPrefix(line, prefix) {
				return
			}
		case <-tick.C:
			io.WriteString(p.stdin, "\n")
		case <-deadline:
			t.Fatalf("no line %q; stderr: %s", prefix, p.stderr)
		}
	}
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	for range p.lines {
	}
	select {
	case err := <-p.done:
		require.NoError(t, err, "stderr: %s", p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20s after stdin closed; stderr: %s", p.stderr)
	}
}

// syncBuffer collects the child's stderr while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
