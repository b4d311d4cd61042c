//go:build package && linux

package packagetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// The Telegraf that make e2e builds (test/e2e/run.sh), reused from its cache.
const (
	telegrafVersion = "v1.37.2"
	telegrafTags    = "custom,inputs.execd,outputs.file,outputs.influxdb,outputs.prometheus_client,parsers.influx,serializers.influx,serializers.prometheus"
	telegrafConf    = "/etc/telegraf/telegraf.conf"
	telegrafUser    = "telegraf"
)

// TestTelegrafUpgradeAndRemove runs the installed package under a real
// Telegraf, as Telegraf's service user, inside the test's namespaces. A
// telegraf --test run leaves the interface attached for handover_timeout. It
// upgrades the package under steady UDP: the post-install reloads Telegraf
// through systemctl (a stand-in that records its calls and sends Telegraf
// the SIGHUP its unit's reload sends), and the new binary takes the
// interface over with no frame let through. Then it removes the package:
// Telegraf starts again and runs its other inputs.
func TestTelegrafUpgradeAndRemove(t *testing.T) {
	testns.RequirePrivileged(t)
	deb := built(t, "deb")
	next := os.Getenv("PKGDIR_NEXT")
	require.NotEmpty(t, next, "PKGDIR_NEXT must name the directory of the second build (make package-test)")
	t.Setenv("PKGDIR", next)
	debNext := built(t, "deb")
	version := os.Getenv("VERSION")
	require.NotEmpty(t, version, "VERSION must be the first build's version (make package-test)")
	versionNext := version + "+next"
	telegraf := telegrafBinary(t)
	udpstream := filepath.Join(readableDir(t), "udpstream")
	run(t, "go", "build", "-o", udpstream, "../e2e/udpstream")

	m := newMountNS(t, "700")
	installOnce(t, m)
	serviceUser(t)
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))

	_, err := os.Stat(telegrafConf)
	require.ErrorIs(t, err, os.ErrNotExist, "%s exists: not this test's to write and remove", telegrafConf)
	outDir := readableDir(t)
	u, err := user.Lookup(telegrafUser)
	require.NoError(t, err)
	uid, _ := strconv.Atoi(u.Uid)
	require.NoError(t, os.Chown(outDir, uid, -1))
	metrics := filepath.Join(outDir, "metrics.out")
	require.NoError(t, os.MkdirAll(filepath.Dir(telegrafConf), 0o755))
	t.Cleanup(func() {
		os.Remove(telegrafConf)
		os.Remove(filepath.Dir(telegrafConf)) // if the package's purge left it empty
	})
	require.NoError(t, os.WriteFile(telegrafConf, []byte(fmt.Sprintf(`[agent]
  interval = "1s"
  round_interval = false
  flush_interval = "1s"
  omit_hostname = true

[[outputs.file]]
  files = [%q]
  data_format = "influx"
`, metrics)), 0o644))
	// Another input, in the config directory as Telegraf's package makes it:
	// it must keep running whatever happens to xdp_drop.
	other := filepath.Join(filepath.Dir(telegrafConf), "telegraf.d", "other.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(other), 0o755))
	t.Cleanup(func() {
		os.Remove(other)
		os.Remove(filepath.Dir(other))
	})
	require.NoError(t, os.WriteFile(other, []byte(`[[inputs.execd]]
  command = ["/bin/sh", "-c", "while read line; do echo other_input value=1i; done"]
  signal = "STDIN"
  data_format = "influx"
`), 0o644))

	// systemctl, once Telegraf runs, says telegraf is active and reloads it
	// with SIGHUP.
	fake := fakeSystemd(t, m)

	out := dpkg(t, m, fake.env, "-i", deb)
	t.Logf("dpkg -i %s:\n%s", deb, out)
	require.NotContains(t, out, "reload", "a first install reloads nothing")
	require.NoError(t, os.WriteFile(pluginConf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n", testns.Dev)), 0o644))

	t.Run("telegraf --test keeps the interface for handover_timeout", func(t *testing.T) {
		cmd := telegrafCmd(m, ns, telegraf, "--input-filter", "execd", "--test", "--test-wait", "3")
		out, err := cmd.CombinedOutput()
		exited := time.Now()
		t.Logf("%s\n%s(%v)", testns.Cmdline(cmd), out, err)
		require.Contains(t, string(out), "xdp_drop_link,interface="+testns.Dev+",mode=native attached=true")
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.NotZero(t, id, "attached after telegraf --test exited")
		_, err = ns.WaitNoXDP(testns.Dev, testns.Hang)
		require.NoError(t, err)
		held := time.Since(exited)
		t.Logf("released %v after telegraf --test exited", held.Round(time.Millisecond))
		require.Greater(t, held, 8*time.Second, "held for handover_timeout (10s) after the test run")
	})

	tg := startTelegraf(t, m, ns, telegraf)
	plugin := waitPlugin(t, tg, 0)
	prog := waitXDP(t, ns)
	require.Equal(t, "telegraf-xdp-drop "+version, versionOf(t, plugin))
	tg.waitLog(t, "attached in native mode")

	fake.systemctl(t, fmt.Sprintf(`case "$1" in
is-active) exit 0 ;;
try-reload-or-restart) kill -HUP %d ;; # what telegraf.service's ExecReload does
esac`, tg.cmd.Process.Pid))

	t.Run("upgrade under traffic", func(t *testing.T) {
		stream := ns.Exec(udpstream, "-netns", ns.Name, "-iface", testns.Peer, "-sink", testns.Dev)
		var report, streamErr bytes.Buffer
		stream.Stdout, stream.Stderr = &report, &streamErr
		require.NoError(t, testproc.Tie(stream).Start())
		defer stream.Process.Kill()
		time.Sleep(time.Second)

		out := dpkg(t, m, fake.env, "--force-confold", "-i", debNext)
		t.Logf("dpkg -i %s:\n%s", debNext, out)
		require.Contains(t, out, "telegraf-xdp-drop: reloaded telegraf (systemctl try-reload-or-restart telegraf): it now runs /usr/bin/telegraf-xdp-drop "+versionNext)
		require.Equal(t, "is-active --quiet telegraf\ntry-reload-or-restart telegraf\n", fake.calls(t))

		newPlugin := waitPlugin(t, tg, plugin)
		tg.waitLog(t, "taken over in place")
		require.Equal(t, "telegraf-xdp-drop "+versionNext, versionOf(t, newPlugin), "the running binary is the new one")
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, prog, id, "the new binary took the program over in place")
		time.Sleep(time.Second)

		require.NoError(t, stream.Process.Signal(syscall.SIGTERM))
		require.NoError(t, stream.Wait(), "udpstream: %s", &streamErr)
		var r struct {
			Delivered int64 `json:"delivered"`
			Leaked    int64 `json:"leaked"`
			NoXDP     int64 `json:"polls_without_xdp"`
		}
		require.NoError(t, json.Unmarshal(report.Bytes(), &r), "%s", &report)
		t.Logf("udpstream across the upgrade: %s", &report)
		require.Positive(t, r.Delivered)
		require.Zero(t, r.Leaked, "UDP frames that reached %s's stack across the upgrade", testns.Dev)
		require.Zero(t, r.NoXDP, "polls that found %s without XDP", testns.Dev)
	})

	t.Run("Telegraf starts after remove", func(t *testing.T) {
		out := dpkg(t, m, nil, "--remove", pkgName)
		t.Logf("dpkg --remove %s:\n%s", pkgName, out)
		tg.stop(t)
		size := fileSize(t, metrics)
		tg := startTelegraf(t, m, ns, telegraf)
		deadline := time.Now().Add(testns.Hang)
		for !strings.Contains(tail(t, metrics, size), "other_input value=1i") {
			require.Nil(t, tg.exited(), "Telegraf exited: %s", tg.stderr)
			require.True(t, time.Now().Before(deadline), "no other_input point from Telegraf: %s", tg.stderr)
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		require.Nil(t, tg.exited(), "Telegraf exited: %s", tg.stderr)
		require.NotContains(t, tg.stderr.String(), "E! ")
		tg.stop(t)
	})

	out = dpkg(t, m, nil, "--purge", pkgName)
	t.Logf("dpkg --purge %s:\n%s", pkgName, out)
	for _, p := range []string{pluginConf, execdConf, execdLink} {
		_, err := os.Lstat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s after purge", p)
	}
}

// fakeSystemd makes the mount namespace look like a systemd system
// (/run/systemd/system exists) and puts a stand-in systemctl first on the
// PATH of env.
type fakeSystemdDirs struct {
	dir string
	env []string
}

func fakeSystemd(t *testing.T, m *mountNS) *fakeSystemdDirs {
	t.Helper()
	f := &fakeSystemdDirs{dir: t.TempDir()}
	require.NoError(t, os.MkdirAll(filepath.Join(f.dir, "run-systemd/system"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(f.dir, "bin"), 0o755))
	run(t, "nsenter", "-t", fmt.Sprint(m.pid), "-m", "--", "mount", "--bind", filepath.Join(f.dir, "run-systemd"), "/run/systemd")
	f.env = []string{"PATH=" + filepath.Join(f.dir, "bin") + ":/usr/sbin:/usr/bin:/sbin:/bin"}
	f.systemctl(t, "exit 3 # inactive")
	return f
}

// systemctl makes the stand-in record its arguments, then run script.
func (f *fakeSystemdDirs) systemctl(t *testing.T, script string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "bin/systemctl"),
		[]byte("#!/bin/sh\necho \"$*\" >>"+filepath.Join(f.dir, "calls")+"\n"+script+"\n"), 0o755))
}

// calls returns what the stand-in was called with, a line a call.
func (f *fakeSystemdDirs) calls(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "calls"))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}

// telegrafBinary returns the Telegraf make e2e builds, building it the same
// way when the cache does not hold it.
func telegrafBinary(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	dir := filepath.Join(cache, "xdp_drop", "telegraf-"+telegrafVersion)
	bin := filepath.Join(dir, "telegraf")
	cached := func() bool {
		info, err := exec.Command("go", "version", "-m", bin).Output()
		return err == nil && strings.Contains(string(info), "\tmod\tgithub.com/influxdata/telegraf\t"+telegrafVersion+"\t") &&
			strings.Contains(string(info), "\tbuild\t-tags="+telegrafTags+"\n")
	}
	if !cached() {
		t.Logf("building telegraf %s into %s (once)", telegrafVersion, dir)
		cmd := exec.Command("go", "install", "-tags", telegrafTags, "github.com/influxdata/telegraf/cmd/telegraf@"+telegrafVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.True(t, cached(), "built %s, but go version -m does not show %s with tags %s", bin, telegrafVersion, telegrafTags)
	}
	// The service user cannot read root's cache.
	copied := filepath.Join(readableDir(t), "telegraf")
	run(t, "cp", bin, copied)
	return copied
}

// readableDir is a temporary directory every user can read.
func readableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "xdpdrop-pkgtest")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// serviceUser makes Telegraf's service user, in the service group, as
// Telegraf's package would, unless it exists; and removes what it made once
// its processes (handover processes among them) are gone.
func serviceUser(t *testing.T) {
	t.Helper()
	if _, err := user.Lookup(telegrafUser); err == nil {
		return
	}
	groupExisted := exec.Command("getent", "group", group()).Run() == nil
	if !groupExisted {
		run(t, "groupadd", "--system", group())
	}
	run(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--no-user-group", "--gid", group(), telegrafUser)
	u, err := user.Lookup(telegrafUser)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, pid := range waitNoProcs(u.Uid, 20*time.Second) {
			t.Errorf("process %d of %s still running: killed", pid, telegrafUser)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if out, err := exec.Command("userdel", telegrafUser).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", telegrafUser, err, out)
		}
		if !groupExisted {
			exec.Command("groupdel", group()).Run()
		}
	})
}

// waitNoProcs waits up to d for uid to have no process, and returns those left.
func waitNoProcs(uid string, d time.Duration) []int {
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		var left []int
		dirs, _ := os.ReadDir("/proc")
		for _, e := range dirs {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if st, err := os.Stat("/proc/" + e.Name()); err == nil && fmt.Sprint(st.Sys().(*syscall.Stat_t).Uid) == uid {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// telegrafProc is Telegraf running as its service user in the test's namespaces.
type telegrafProc struct {
	cmd    *exec.Cmd
	stderr *binarytest.Buffer
	done   chan struct{}
}

func startTelegraf(t *testing.T, m *mountNS, ns *testns.NS, bin string) *telegrafProc {
	t.Helper()
	cmd := telegrafCmd(m, ns, bin)
	p := &telegrafProc{cmd: cmd, stderr: &binarytest.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	require.NoError(t, testproc.Tie(cmd).Start())
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if p.exited() == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
			}
		}
		t.Logf("telegraf's log:\n%s", p.stderr)
	})
	return p
}

// telegrafCmd runs Telegraf as its service user in the test's namespaces,
// with the packaged config file and directory. setpriv execs Telegraf in
// place (runuser would stay its parent), so the process started is
// Telegraf and SIGHUP reaches it.
func telegrafCmd(m *mountNS, ns *testns.NS, bin string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", fmt.Sprint(m.pid), "-m", "--net=/run/netns/" + ns.Name, "--",
		"setpriv", "--reuid=" + telegrafUser, "--regid=" + group(), "--init-groups", "--",
		bin, "--config", telegrafConf, "--config-directory", filepath.Dir(telegrafConf) + "/telegraf.d"}, args...)...)
}

// exited returns Telegraf's exit state, nil while it runs.
func (p *telegrafProc) exited() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

func (p *telegrafProc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(testns.Hang):
		t.Fatalf("Telegraf still running after SIGTERM: %s", p.stderr)
	}
}

func (p *telegrafProc) waitLog(t *testing.T, text string) {
	t.Helper()
	for deadline := time.Now().Add(testns.Hang); !strings.Contains(p.stderr.String(), text); time.Sleep(50 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no %q in Telegraf's log:\n%s", text, p.stderr)
		require.Nil(t, p.exited(), "Telegraf exited:\n%s", p.stderr)
	}
}

// waitPlugin waits for Telegraf to run telegraf-xdp-drop with a pid other
// than not, and returns its pid.
func waitPlugin(t *testing.T, p *telegrafProc, not int) int {
	t.Helper()
	for deadline := time.Now().Add(testns.Hang); ; time.Sleep(50 * time.Millisecond) {
		dirs, _ := os.ReadDir("/proc")
		for _, e := range dirs {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == not {
				continue
			}
			stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...; comm is cut at 15 bytes.
			_, rest, _ := strings.Cut(string(stat), "(telegraf-xdp-dr) ")
			f := strings.Fields(rest)
			if len(f) > 1 && f[1] == fmt.Sprint(p.cmd.Process.Pid) {
				return pid
			}
		}
		require.True(t, time.Now().Before(deadline), "Telegraf runs no telegraf-xdp-drop:\n%s", p.stderr)
		require.Nil(t, p.exited(), "Telegraf exited:\n%s", p.stderr)
	}
}

func waitXDP(t *testing.T, ns *testns.NS) uint32 {
	t.Helper()
	for deadline := time.Now().Add(testns.Hang); ; time.Sleep(50 * time.Millisecond) {
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		if id != 0 {
			return id
		}
		require.True(t, time.Now().Before(deadline), "nothing attached to %s", testns.Dev)
	}
}

// versionOf runs the executable process pid runs (even if replaced on disk
// since) with -version and returns its first line.
func versionOf(t *testing.T, pid int) string {
	t.Helper()
	out := run(t, fmt.Sprintf("/proc/%d/exe", pid), "-version")
	first, _, _ := strings.Cut(out, "\n")
	return first
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

// tail returns what path holds from offset on.
func tail(t *testing.T, path string, offset int64) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Seek(offset, io.SeekStart)
	require.NoError(t, err)
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return string(b)
}
