//go:build package && linux

package packagetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestInstalledPackage installs the .deb on a BPF filesystem mounted as
// systemd mounts it (1700), checks what it set up, runs the installed binary
// as a member of the service group (attach, pin_path, counters across a
// restart) and as nobody (refused, nothing attached), then removes and
// purges it with pins left, and checks the machine is as it was.
func TestInstalledPackage(t *testing.T) {
	testns.RequirePrivileged(t)
	deb := built(t, "deb")
	m := newMountNS(t, "700")
	installOnce(t, m)
	_, err := os.Stat(m.path(pinDir))
	require.ErrorIs(t, err, os.ErrNotExist)
	groupExisted := exec.Command("getent", "group", group()).Run() == nil
	t.Cleanup(func() {
		if !groupExisted {
			if out, err := exec.Command("groupdel", group()).CombinedOutput(); err != nil {
				t.Errorf("groupdel %s (created by the package for this test): %v: %s", group(), err, out)
			}
		}
	})

	out := dpkg(t, m, nil, "-i", deb)
	t.Logf("dpkg -i %s:\n%s", deb, out)
	if !groupExisted {
		require.Contains(t, out, "created the system group "+group())
	}
	require.Contains(t, out, "/sys/fs/bpf was 1700: added search permission for others (chmod o+x) so that the service user reaches /sys/fs/bpf/xdp_drop; purging the package takes it back")
	require.NotContains(t, out, "reload", "a first install reloads nothing")

	ls := run(t, "ls", "-l", installed)
	getcap := run(t, "getcap", installed)
	t.Logf("ls -l %s\n%s", installed, ls)
	t.Logf("getcap %s\n%s", installed, getcap)
	require.Regexp(t, `^-rwxr-x--- 1 root `+regexp.QuoteMeta(group())+` `, ls)
	require.Equal(t, installed+" "+caps+"\n", getcap)
	require.Equal(t, os.FileMode(0o1701), modeOf(t, m.path(bpffs)), "only search permission for others is added to %s", bpffs)
	fi, err := os.Stat(m.path(pinDir))
	require.NoError(t, err, "the post-install creates the pin directory")
	require.Equal(t, os.FileMode(0o770), fi.Mode().Perm())
	require.Equal(t, gid(t, group()), fi.Sys().(*syscall.Stat_t).Gid)

	fi, err = os.Stat(runDir)
	require.NoError(t, err, "the package creates the handover directory")
	require.Equal(t, os.FileMode(0o770), fi.Mode().Perm())
	require.Equal(t, gid(t, group()), fi.Sys().(*syscall.Stat_t).Gid)
	target, err := os.Readlink(execdLink)
	require.NoError(t, err, "the execd snippet is linked into Telegraf's config directory")
	require.Equal(t, "../../telegraf-xdp-drop/execd.conf", target)

	run(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--no-user-group", "--gid", group(), svcUser)
	svcUID := strings.TrimSpace(run(t, "id", "-u", svcUser))
	t.Cleanup(func() {
		for _, pid := range waitNoProcs(svcUID, 20*time.Second) {
			t.Errorf("process %d of %s still running: killed", pid, svcUser)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if out, err := exec.Command("userdel", svcUser).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", svcUser, err, out)
		}
	})

	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	// handover_timeout = "0s": a handover process would hold the service
	// user for 10 s after each run, and userdel refuses a user in use.
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n  pin_path = %q\n  handover_timeout = \"0s\"\n", testns.Dev, pinDir))

	t.Run("nobody is refused", func(t *testing.T) {
		cmd := m.as(ns, "nobody", installed, "-config", conf, "-poll_interval_disabled")
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
			p := start(t, m.as(ns, svcUser, installed, "-config", conf, "-poll_interval_disabled"))
			p.waitLine(t, "xdp_drop_link,interface="+testns.Dev+",mode=native attached=true")
			send(n)
			want += n
			p.waitLine(t, fmt.Sprintf("xdp_drop,action=drop,family=ipv4,interface=%s,protocol=udp packets=%di", testns.Dev, want))
			require.NotContains(t, p.stderr.String(), "E! ")
			p.stop(t)
			if i == 0 {
				t.Logf("pins after the first run:\n%s", run(t, "ls", "-lR", m.path(pinDir)))
			}
		}
	})

	// Reinstalling (as an upgrade does) unpacks a binary without group or
	// capabilities; the post-install script restores both, and says that
	// Telegraf runs it when it starts: systemd here does not run it.
	fake := fakeSystemd(t, m)
	out = dpkg(t, m, fake.env, "-i", deb)
	t.Logf("dpkg -i %s again:\n%s", deb, out)
	require.Contains(t, out, "telegraf-xdp-drop: telegraf.service is not active: it runs /usr/bin/telegraf-xdp-drop "+os.Getenv("VERSION")+" when it starts")
	require.Equal(t, "is-active --quiet telegraf\n", fake.calls(t), "no reload of a Telegraf that is not running")
	require.Regexp(t, `^-rwxr-x--- 1 root `+regexp.QuoteMeta(group())+` `, run(t, "ls", "-l", installed))
	require.Equal(t, installed+" "+caps+"\n", run(t, "getcap", installed))
	require.Equal(t, os.FileMode(0o1701), modeOf(t, m.path(bpffs)))

	// Removing leaves the service user's pins, and says how to release them.
	out = dpkg(t, m, nil, "--remove", pkgName)
	t.Logf("dpkg --remove %s:\n%s", pkgName, out)
	require.Contains(t, out, pinDir+" still holds pins (counters, or attachments kept with keep_attached), left in place; rm -r "+pinDir+" releases them")
	_, err = os.Lstat(execdLink)
	require.ErrorIs(t, err, os.ErrNotExist, "the snippet's link goes with the binary")
	_, err = os.Stat(execdConf)
	require.NoError(t, err, "remove keeps the conffiles")

	// Purging takes back what the install added, pins or not.
	out = dpkg(t, m, nil, "--purge", pkgName)
	t.Logf("dpkg --purge %s:\n%s", pkgName, out)
	require.Contains(t, out, "took back the search permission for others on /sys/fs/bpf that the package added (chmod o-x): it is 1700 again")
	require.Contains(t, out, pinDir+" still holds pins, left in place (only root reaches them now: /sys/fs/bpf is 1700); rm -r "+pinDir+" releases them")
	require.Equal(t, os.FileMode(0o1700), modeOf(t, m.path(bpffs)), "purge restores the mode of %s", bpffs)
	_, err = os.Stat(m.path(filepath.Join(pinDir, testns.Dev)))
	require.NoError(t, err, "the pins stay")
	require.NoError(t, os.RemoveAll(m.path(pinDir)))
	for _, p := range []string{installed, pluginConf, execdConf, execdLink, tmpfiles, dropinDoc, docDir, runDir, bpffsNote, "/var/lib/telegraf-xdp-drop", "/usr/lib/telegraf-xdp-drop"} {
		_, err := os.Lstat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s after purge", p)
	}
}

// TestInstalledBPFFSOpen: a BPF filesystem others may already use (1777)
// keeps its mode through install and purge.
func TestInstalledBPFFSOpen(t *testing.T) {
	m, deb := installInto(t, "777")
	require.Equal(t, os.FileMode(0o1777), modeOf(t, m.path(bpffs)), "the install takes nothing away from %s", bpffs)
	// Without systemd an upgrade says who must reload Telegraf.
	out := dpkg(t, m, nil, "-i", deb)
	t.Logf("dpkg -i %s again:\n%s", deb, out)
	require.Contains(t, out, "telegraf-xdp-drop: not under systemd: a running Telegraf keeps the previous /usr/bin/telegraf-xdp-drop until it reloads (SIGHUP, or its service manager's reload)")
	require.NotContains(t, out, "added search permission")
	_, err := os.Stat(bpffsNote)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing added, nothing noted")
	fi, err := os.Stat(m.path(pinDir))
	require.NoError(t, err)
	require.Equal(t, gid(t, group()), fi.Sys().(*syscall.Stat_t).Gid)

	out = dpkg(t, m, nil, "--purge", pkgName)
	t.Logf("dpkg --purge %s:\n%s", pkgName, out)
	require.NotContains(t, out, "took back")
	require.Equal(t, os.FileMode(0o1777), modeOf(t, m.path(bpffs)))
	_, err = os.Stat(m.path(pinDir))
	require.ErrorIs(t, err, os.ErrNotExist, "purge removes the empty pin directory")
	_, err = os.Stat("/var/lib/telegraf-xdp-drop")
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestInstalledBPFFSOpenPinsLeft: where others may pass through the BPF
// filesystem (1777, which the package leaves), pins left at purge are
// still reached by the service user's group, and purge says so rather
// than that only root reaches them.
func TestInstalledBPFFSOpenPinsLeft(t *testing.T) {
	m, _ := installInto(t, "777")
	require.NoError(t, os.Mkdir(m.path(filepath.Join(pinDir, testns.Dev)), 0o750), "a pin directory the service user left")

	out := dpkg(t, m, nil, "--purge", pkgName)
	t.Logf("dpkg --purge %s:\n%s", pkgName, out)
	require.Contains(t, out, fmt.Sprintf("%s still holds pins, left in place (root and the group %s (the service user's) still reach them: /sys/fs/bpf is 1777, which others may pass, and %s is 770 root:%s); rm -r %s releases them",
		pinDir, group(), pinDir, group(), pinDir))
	require.NotContains(t, out, "only root")
	require.Equal(t, os.FileMode(0o1777), modeOf(t, m.path(bpffs)))
	// The group's members list them indeed.
	user := "nobody"
	listing, err := exec.Command("nsenter", "-t", fmt.Sprint(m.pid), "-m", "--", "runuser", "-u", user, "-g", group(), "--", "ls", pinDir).CombinedOutput()
	require.NoError(t, err, "%s", listing)
	require.Equal(t, testns.Dev+"\n", string(listing))
	require.NoError(t, os.RemoveAll(m.path(pinDir)))
}

// TestInstalledBPFFSChangedSince: a mode someone changed after the install
// added o+x is theirs: purge leaves it and says how to restore the old one.
func TestInstalledBPFFSChangedSince(t *testing.T) {
	m, _ := installInto(t, "700")
	require.Equal(t, os.FileMode(0o1701), modeOf(t, m.path(bpffs)))
	require.NoError(t, syscall.Chmod(m.path(bpffs), 0o1711), "another tool's choice")

	out := dpkg(t, m, nil, "--purge", pkgName)
	t.Logf("dpkg --purge %s:\n%s", pkgName, out)
	require.Contains(t, out, "/sys/fs/bpf is 1711, changed since the package made it 1701 from 1700: left as it is; chmod 1700 /sys/fs/bpf restores the mode it had before the package")
	require.Equal(t, os.FileMode(0o1711), modeOf(t, m.path(bpffs)), "purge takes nothing away that it did not add")
	_, err := os.Stat(bpffsNote)
	require.ErrorIs(t, err, os.ErrNotExist, "the note goes with the package")
}

// TestInstalledWithoutBPFFS: on a host with no BPF filesystem on
// /sys/fs/bpf (a plain sysfs directory), install, the tmpfiles entry,
// remove and purge all succeed, change nothing there (no chmod of a
// directory that is not a BPF filesystem) and say what pin_path needs.
func TestInstalledWithoutBPFFS(t *testing.T) {
	testns.RequirePrivileged(t)
	deb := built(t, "deb")
	m := newMountNSWithoutBPFFS(t)
	installOnce(t, m)
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(m.path(bpffs), &st))
	require.NotEqual(t, int64(unix.BPF_FS_MAGIC), int64(st.Type), "nothing mounted on %s in the test's namespace", bpffs)
	before := modeOf(t, m.path(bpffs))
	groupExisted := exec.Command("getent", "group", group()).Run() == nil
	out := dpkg(t, m, nil, "-i", deb)
	t.Logf("dpkg -i %s:\n%s", deb, out)
	if !groupExisted {
		t.Cleanup(func() { exec.Command("groupdel", group()).Run() })
	}
	require.Contains(t, out, `telegraf-xdp-drop: no BPF filesystem on /sys/fs/bpf, so pin_path = "/sys/fs/bpf/xdp_drop" attaches without pins; to pin, as root run: mount -t bpf bpf /sys/fs/bpf (with systemd: systemctl start sys-fs-bpf.mount), then /usr/lib/telegraf-xdp-drop/bpffs-access`)
	require.NotContains(t, out, "added search permission")
	require.Equal(t, before, modeOf(t, m.path(bpffs)), "the install changes nothing on %s", bpffs)
	_, err := os.Stat(bpffsNote)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing added, nothing noted")
	tmp, err := m.command(nil, "systemd-tmpfiles", "--create", tmpfiles).CombinedOutput()
	require.NoError(t, err, "the tmpfiles entry at boot: %s", tmp)
	require.DirExists(t, runDir)

	out = dpkg(t, m, nil, "--remove", pkgName)
	t.Logf("dpkg --remove %s:\n%s", pkgName, out)
	out = dpkg(t, m, nil, "--purge", pkgName)
	t.Logf("dpkg --purge %s:\n%s", pkgName, out)
	require.NotContains(t, out, "took back")
	require.Equal(t, before, modeOf(t, m.path(bpffs)), "the purge changes nothing on %s", bpffs)
	for _, p := range []string{installed, pluginConf, tmpfiles, runDir, bpffsNote} {
		_, err := os.Lstat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s after purge", p)
	}
}

// installInto installs the .deb in a mount namespace of the test's own on a
// BPF filesystem of mode, and returns it with the package's path; the
// group the install creates goes when the test ends.
func installInto(t *testing.T, mode string) (*mountNS, string) {
	t.Helper()
	testns.RequirePrivileged(t)
	deb := built(t, "deb")
	m := newMountNS(t, mode)
	installOnce(t, m)
	groupExisted := exec.Command("getent", "group", group()).Run() == nil
	out := dpkg(t, m, nil, "-i", deb)
	t.Logf("dpkg -i %s:\n%s", deb, out)
	if !groupExisted {
		t.Cleanup(func() { exec.Command("groupdel", group()).Run() })
	}
	return m, deb
}
