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
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
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
	execdConf  = "/etc/telegraf-xdp-drop/execd.conf"      // the snippet, a conffile
	execdLink  = "/etc/telegraf/telegraf.d/xdp_drop.conf" // its link in Telegraf's config directory
	docDir     = "/usr/share/doc/telegraf-xdp-drop"
	bpffsNote  = "/run/telegraf-xdp-drop-bpffs-mode"
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
		"./usr/bin/telegraf-xdp-drop":                                                     "-rwxr-x--- root/root",
		"./etc/telegraf-xdp-drop/xdp_drop.conf":                                           "-rw-r--r-- root/root",
		"./etc/telegraf-xdp-drop/execd.conf":                                              "-rw-r--r-- root/root",
		"./etc/telegraf/telegraf.d/xdp_drop.conf":                                         "l--------- root/root -> ../../telegraf-xdp-drop/execd.conf",
		"./usr/lib/tmpfiles.d/telegraf-xdp-drop.conf":                                     "-rw-r--r-- root/root",
		"./usr/lib/telegraf-xdp-drop/bpffs-access":                                        "-rwxr-xr-x root/root",
		"./usr/lib/systemd/system/telegraf-xdp-drop-bpffs.service":                        "-rw-r--r-- root/root",
		"./usr/lib/systemd/system/telegraf.service.wants/telegraf-xdp-drop-bpffs.service": "l--------- root/root -> ../telegraf-xdp-drop-bpffs.service",
		"./usr/share/doc/telegraf-xdp-drop/telegraf.service.d-xdp-drop.conf":              "-rw-r--r-- root/root",
		"./usr/share/doc/telegraf-xdp-drop/packaging/telegraf.service.d-xdp-drop.conf":    "l--------- root/root -> ../telegraf.service.d-xdp-drop.conf",
		"./usr/share/doc/telegraf-xdp-drop/README.md":                                     "-rw-r--r-- root/root",
		"./usr/share/doc/telegraf-xdp-drop/BENCHMARKS.md":                                 "-rw-r--r-- root/root",
		"./usr/share/doc/telegraf-xdp-drop/plugins/inputs/xdp_drop/README.md":             "-rw-r--r-- root/root",
		"./usr/share/doc/telegraf-xdp-drop/sample.conf":                                   "-rw-r--r-- root/root",
		"./usr/share/lintian/overrides/telegraf-xdp-drop":                                 "-rw-r--r-- root/root",
	}
	// Every document of docs/ under the doc directory.
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	for _, d := range docs {
		want["."+docDir+"/docs/"+filepath.Base(d)] = "-rw-r--r-- root/root"
	}
	// Every file of examples/, whatever it holds, under the doc directory.
	require.NoError(t, filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			want["."+docDir+"/"+strings.TrimPrefix(path, "../../")] = "-rw-r--r-- root/root"
		}
		return err
	}))
	require.Equal(t, want, debFiles(list), "the files the .deb holds, with mode and owner")

	info := run(t, "dpkg-deb", "-I", deb)
	require.Regexp(t, `(?m)^ Depends: libc6 \(>= 2\.\d+\), libcap2-bin, passwd$`, info)
	require.Regexp(t, `(?m)^ *\d+ bytes, +\d+ lines +\* +postinst `, info)
	require.Regexp(t, `(?m)^ *\d+ bytes, +\d+ lines +\* +postrm `, info)
	ctrl := t.TempDir()
	run(t, "dpkg-deb", "-e", deb, ctrl)
	conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	require.NoError(t, err)
	require.Equal(t, execdConf+"\n"+pluginConf+"\n", string(conffiles), "the snippet's link is no conffile: it goes on remove")
	postinst, err := os.ReadFile(filepath.Join(ctrl, "postinst"))
	require.NoError(t, err)
	checkPostinst(t, string(postinst))
	execd := run(t, "sh", "-c", fmt.Sprintf("dpkg-deb --fsys-tarfile %s | tar -xOf - .%s", deb, execdConf))
	require.Contains(t, execd, `command = ["/usr/bin/telegraf-xdp-drop", "-config", "/etc/telegraf-xdp-drop/xdp_drop.conf", "-poll_interval_disabled"]`)
	tmp := run(t, "sh", "-c", fmt.Sprintf("dpkg-deb --fsys-tarfile %s | tar -xOf - .%s", deb, tmpfiles))
	require.NotRegexp(t, `(?m)^[^#].*/sys/fs/bpf`, tmp, "the pin directory is bpffs-access's to make, only on a BPF filesystem: an entry on a host without one fails systemd-tmpfiles")
	require.Contains(t, tmp, "d /run/telegraf-xdp-drop 0770 root "+group()+" -")
	require.NotRegexp(t, `(?m)^[^#].*/sys/fs/bpf `, tmp, "tmpfiles sets no mode on the BPF filesystem's root (it would take away what others had)")
}

// debFiles maps each non-directory entry of a dpkg-deb -c listing to its
// mode and owner, and a link's target.
func debFiles(list string) map[string]string {
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		if len(f) >= 8 && f[len(f)-2] == "->" {
			files[f[len(f)-3]] = f[0] + " " + f[1] + " -> " + f[len(f)-1]
			continue
		}
		files[f[len(f)-1]] = f[0] + " " + f[1]
	}
	return files
}

// TestDebDocLinks: every relative link of the installed README, of the
// documents of docs/ and of the plugin's README resolves in the installed
// doc directory, as it does in the repository.
func TestDebDocLinks(t *testing.T) {
	deb := built(t, "deb")
	files := debFiles(run(t, "dpkg-deb", "-c", deb))
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	for _, d := range append([]string{"README.md", "plugins/inputs/xdp_drop/README.md"}, docs...) {
		checkDocLinks(t, files, strings.TrimPrefix(d, "../../"))
	}
}

// checkDocLinks checks the relative links of doc, a path in the repository
// and under the doc directory alike.
func checkDocLinks(t *testing.T, files map[string]string, doc string) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("../..", doc))
	require.NoError(t, err)
	links := regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(string(readme), -1)
	for _, l := range links {
		rel := filepath.Join(filepath.Dir(doc), l[1])
		path := filepath.Join(docDir, rel)
		for hops := 0; ; hops++ { // through the package's own links
			entry, ok := files["."+path]
			require.True(t, ok, "%s links to %s, which the package does not install as %s", doc, l[1], path)
			_, target, isLink := strings.Cut(entry, " -> ")
			if !isLink {
				break
			}
			require.Less(t, hops, 4, "links from %s", l[1])
			path = filepath.Join(filepath.Dir(path), target)
		}
		_, err := os.Stat(filepath.Join("../..", rel))
		require.NoError(t, err, "%s's link %s resolves in the repository", doc, l[1])
	}
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
	require.Regexp(t, `(?m)^l.* /etc/telegraf/telegraf.d/xdp_drop.conf -> ../../telegraf-xdp-drop/execd.conf$`, list)
	require.Regexp(t, `(?m)^-rw-r--r-- .* /usr/share/doc/telegraf-xdp-drop/examples/telegraf.d/xdp_drop.conf$`, list)
	require.Equal(t, execdConf+"\n"+pluginConf+"\n", run(t, "rpm", "-qp", "--configfiles", rpm))
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

// takeLock serialises the tests that install the package on this machine.
func takeLock(t *testing.T) *os.File {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	return f
}

// dpkg runs dpkg in the test's mount namespace, with env added to its
// environment, waiting while another dpkg or apt holds its lock.
func dpkg(t *testing.T, m *mountNS, env []string, args ...string) string {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		out, err := m.command(env, "dpkg", args...).CombinedOutput()
		if err == nil {
			return string(out)
		}
		if !strings.Contains(string(out), "lock") || time.Now().After(deadline) {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		time.Sleep(2 * time.Second)
	}
}

// mountNS is a mount namespace of the test's own with a fresh BPF
// filesystem on /sys/fs/bpf: what the package does to the BPF filesystem
// happens there, never to this machine's own, whatever its mode. The
// filesystem is also mounted on a temporary directory of the initial mount
// namespace, since the binary keeps pins only on a BPF filesystem that
// outlives it there.
type mountNS struct {
	pid int
}

// newMountNS makes the namespace, with the BPF filesystem mounted with mode
// (octal; the kernel adds the sticky bit).
func newMountNS(t *testing.T, mode string) *mountNS {
	t.Helper()
	host := t.TempDir()
	run(t, "mount", "-t", "bpf", "-o", "mode="+mode, "bpf", host)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", host).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", host, err, out)
		}
	})
	return startMountNS(t, "mount --bind "+host+" "+bpffs)
}

// newMountNSWithoutBPFFS makes a namespace whose /sys/fs/bpf has nothing
// mounted: sysfs's own directory, mode 555, which no one may chmod, as on
// a host that never mounted the BPF filesystem.
func newMountNSWithoutBPFFS(t *testing.T) *mountNS {
	t.Helper()
	return startMountNS(t, "while mountpoint -q "+bpffs+"; do umount -l "+bpffs+" || exit; done")
}

// startMountNS makes the namespace, running setup in it first.
func startMountNS(t *testing.T, setup string) *mountNS {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		setup+" && echo ready && exec sleep infinity")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr binarytest.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, testproc.Tie(cmd).Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	require.Equal(t, "ready\n", line, "mount namespace with a BPF filesystem: %s", &stderr)
	return &mountNS{pid: cmd.Process.Pid}
}

// command runs name in the namespace, with env added to the environment.
func (m *mountNS) command(env []string, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", fmt.Sprint(m.pid), "-m", "--", "env"}, append(append(env, name), args...)...)...)
}

// path is where the test sees path of the namespace.
func (m *mountNS) path(path string) string { return fmt.Sprintf("/proc/%d/root%s", m.pid, path) }

// as runs the command as user in the mount namespace and the network
// namespace ns. (ip netns exec would mount a new /sys, hiding the BPF
// filesystem.) runuser switches user the way a service manager does;
// setpriv would keep root's capabilities until exec, so the kernel's exec
// permission check would still pass.
func (m *mountNS) as(ns *testns.NS, user, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", fmt.Sprint(m.pid), "-m", "--net=/run/netns/" + ns.Name, "--", "runuser", "-u", user, "--", name}, args...)...)
}

// installOnce takes the lock of the tests that install the package, checks
// that it is not installed, and purges it when the test ends.
func installOnce(t *testing.T, m *mountNS) {
	t.Helper()
	lock := takeLock(t)
	t.Cleanup(func() { lock.Close() })
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkgName).Output(); err == nil && strings.Contains(string(out), "installed") {
		t.Fatalf("%s is installed on this machine (%s); this test installs and purges it: remove it first", pkgName, out)
	}
	hostMode := modeOf(t, bpffs)
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkgName).Output(); err == nil && !strings.Contains(string(out), "not-installed") {
			os.RemoveAll(m.path(filepath.Join(pinDir, testns.Dev)))
			dpkg(t, m, nil, "--purge", pkgName)
		}
		require.Equal(t, hostMode, modeOf(t, bpffs), "this machine's own %s is untouched", bpffs)
	})
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
	run    *binarytest.Proc
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  <-chan string
	stderr *binarytest.Buffer
}

func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	r := binarytest.Start(t, cmd, 256)
	return &proc{run: r, cmd: r.Cmd, stdin: r.Stdin, lines: r.Lines, stderr: r.Stderr}
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
	case <-p.run.Done:
		require.NoError(t, p.run.Err(), "stderr: %s", p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20s after stdin closed; stderr: %s", p.stderr)
	}
}
