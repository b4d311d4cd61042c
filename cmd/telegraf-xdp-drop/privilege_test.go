//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

const setcapCaps = "cap_bpf,cap_net_admin,cap_perfmon+ep"

// TestLeastPrivilege runs the binary as an unprivileged user: with the file
// capabilities make install grants it attaches and reports, and hands over
// to its successor on stop; without them it fails with the exact setcap
// command to run.
func TestLeastPrivilege(t *testing.T) {
	ns := testns.New(t)
	for _, tool := range []string{"setcap", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (Debian libcap2-bin, util-linux): %v", tool, err)
		}
	}
	dir, bin := binarytest.CopyForOthers(t, binary, "")
	// The handover sockets of user 65534: removed after, unless they were there before.
	sockets := filepath.Join(os.TempDir(), "xdp_drop-handover-65534")
	if _, err := os.Stat(sockets); os.IsNotExist(err) {
		t.Cleanup(func() { os.RemoveAll(sockets) })
	}
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev)), 0o644))
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))

	runAsNobody := func(conf string) (string, string) {
		return gatherOnce(t, ns.Exec("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled"))
	}

	out, errOut := runAsNobody(conf)
	require.Contains(t, out, "attached=false")
	require.Contains(t, errOut, "E! ")
	require.Contains(t, errOut, fmt.Sprintf("chown root:telegraf %s && chmod 0750 %s && setcap %s %s", bin, bin, setcapCaps, bin),
		"the error prints the exact commands, group and mode before the capabilities")

	// CAP_PERFMON is needed: the verifier refuses the program's
	// variable-offset packet pointer arithmetic without it.
	require.NoError(t, exec.Command("setcap", "cap_bpf,cap_net_admin+ep", bin).Run())
	out, errOut = runAsNobody(conf)
	require.Contains(t, out, "attached=false")
	require.Contains(t, errOut, "CAP_PERFMON")

	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	out, errOut = runAsNobody(conf)
	require.Contains(t, out, "attached=true", "stderr: %s", errOut)
	require.NotContains(t, errOut, "E! ")
	require.Contains(t, errOut, "held for handover", "the stop hands over, as the service user")

	// The successor, as the same user with the same config file (edited),
	// takes the attachment over; with handover_timeout = "0s" it then
	// detaches on stop.
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev)), 0o644))
	out, errOut = runAsNobody(conf)
	require.Contains(t, out, "attached=true", "stderr: %s", errOut)
	require.Contains(t, errOut, "taken over in place", "stderr: %s", errOut)
	require.Contains(t, errOut, "counters continue")
	_, err := ns.WaitNoXDP(testns.Dev, testns.Hang)
	require.NoError(t, err)

	// With the capabilities, a config others may write is refused before
	// anything is attached.
	require.NoError(t, os.Chmod(conf, 0o666))
	refused := ns.Exec("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled")
	combined, err := refused.CombinedOutput()
	require.Error(t, err, "%s", combined)
	require.Contains(t, string(combined), "E! config "+conf+": refusing to run with CAP_BPF, CAP_NET_ADMIN: "+conf+" is writable by its group and all users (mode 0666)")
	require.Contains(t, string(combined), "chmod go-w "+conf)
	require.NotContains(t, string(combined), "xdp_drop_link")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "nothing attached")
}

// TestPinPathUnderFileCapabilities: as the service user, with the file
// capabilities, on a BPF filesystem whatever its mode, and without one.
// Where it may create the pin directory it pins; where it may not, it still
// enforces the drop policy, without pins, and its warning names the
// directory that stops it, that directory's mode and the command that fixes
// it. Each case mounts a BPF filesystem of its own: the host's /sys/fs/bpf,
// its mode or its absence, changes nothing.
func TestPinPathUnderFileCapabilities(t *testing.T) {
	ns := testns.New(t)
	dir, bin := binarytest.CopyForOthers(t, binary, "")
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	asNobody := func(pins string) []string {
		conf := filepath.Join(dir, fmt.Sprintf("xdp_drop-%d.conf", time.Now().UnixNano()))
		require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  pin_path = %q\n  handover_timeout = \"0s\"\n", testns.Dev, pins)), 0o644))
		return []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled"}
	}
	// nsenter keeps this mount namespace, where the test's BPF filesystems are.
	inTestNS := func(args []string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=" + ns.Path, "--"}, args...)...)
	}

	// bpffs always sets the sticky bit on its root: systemd's mode=0700 mount
	// is 1700. On a plain mount (1777), root's own directories stop the user.
	for _, c := range []struct {
		name      string
		mountMode os.FileMode
		private   string // a root-only directory on it to pin under, if any
		wantMode  os.FileMode
	}{
		{"bpffs mode 1700", 0o700, "", 0o1700},
		{"root-only directory on a bpffs of mode 1777", 0o1777, "private", 0o700},
	} {
		t.Run(c.name, func(t *testing.T) {
			blocked := filepath.Join(testns.BPFFS(t, c.mountMode), c.private)
			require.NoError(t, os.MkdirAll(blocked, 0o700))
			pins := filepath.Join(blocked, "pins")
			out, errOut := gatherOnce(t, inTestNS(asNobody(pins)))
			t.Logf("%s", errOut)
			require.Contains(t, out, "attached=true", "the drop policy is enforced; stderr: %s", errOut)
			require.Contains(t, errOut, fmt.Sprintf(`W! interface %q: attaching without pins, so counters restart at every restart: pin_path unusable: mkdir %s: permission denied; `+
				`user nobody may not pass through %s (mode %04o); as root run: chmod o+x %s, or for the package's pin directory: %s`,
				testns.Dev, pins, blocked, c.wantMode, blocked, bpf.PackageBPFFSAccess))
			require.NotContains(t, errOut, "E! ")
			_, err := os.Stat(pins)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing pinned")
		})
	}

	// A BPF filesystem mounted without systemd is open to all (1777): the
	// service user creates the pin directory, its own, and pins there.
	t.Run("bpffs mode 1777", func(t *testing.T) {
		pins := filepath.Join(testns.BPFFS(t, 0o1777), "pins")
		out, errOut := gatherOnce(t, inTestNS(asNobody(pins)))
		t.Logf("%s", errOut)
		require.Contains(t, out, "attached=true", "stderr: %s", errOut)
		require.NotContains(t, errOut, "W! ")
		require.NotContains(t, errOut, "E! ")
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(filepath.Join(pins, testns.Dev), &st))
		require.Equal(t, uint32(65534), st.Uid, "the pin directory is the service user's")
		counters, err := filepath.Glob(filepath.Join(pins, testns.Dev, "counters_*"))
		require.NoError(t, err)
		require.Len(t, counters, 1, "the counters are pinned")
	})

	// ip netns exec mounts a fresh /sys, without the BPF filesystem, and the
	// service user may not mount one.
	t.Run("no BPF filesystem", func(t *testing.T) {
		pins := filepath.Join(bpf.DefaultBPFFS, "xdpdrop-test-"+filepath.Base(dir), "pins")
		args := asNobody(pins)
		out, errOut := gatherOnce(t, ns.Exec(args[0], args[1:]...))
		t.Logf("%s", errOut)
		require.Contains(t, out, "attached=true", "the drop policy is enforced; stderr: %s", errOut)
		require.Contains(t, errOut, fmt.Sprintf(`W! interface %q: attaching without pins, so counters restart at every restart: pin_path unusable: `+
			`no BPF filesystem on /sys/fs/bpf, and mounting one needs CAP_SYS_ADMIN, which this process lacks; as root run: mount -t bpf bpf /sys/fs/bpf`, testns.Dev))
		require.NotContains(t, errOut, "E! ")
	})
}

// gatherOnce starts cmd, asks for one gather, closes stdin and returns what
// it printed.
func gatherOnce(t *testing.T, cmd *exec.Cmd) (string, string) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stdout, stderr binarytest.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, testproc.Tie(cmd).Start())
	_, err = io.WriteString(stdin, "\n")
	require.NoError(t, err)
	deadline := time.Now().Add(testns.Hang)
	for !strings.Contains(stdout.String(), "xdp_drop_link") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stdin.Close()
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	return stdout.String(), stderr.String()
}

// TestReplaceUnderFileCapabilities: with only the file capabilities the
// binary cannot inspect another program or list BPF links (CAP_SYS_ADMIN).
// It says so instead of guessing whose the program is; replace = true
// removes a program attached through netlink (CAP_NET_ADMIN suffices) and,
// for one attached through a bpf_link, names the missing capability.
func TestReplaceUnderFileCapabilities(t *testing.T) {
	ns := testns.New(t)
	dir, bin := binarytest.CopyForOthers(t, binary, "")
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	config := func(replace bool) string {
		conf := filepath.Join(dir, fmt.Sprintf("replace-%v.conf", replace))
		require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  replace = %v\n  handover_timeout = \"0s\"\n", testns.Dev, replace)), 0o644))
		return conf
	}
	asNobody := func(conf string) *exec.Cmd {
		return ns.Exec("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled")
	}
	foreign, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "foreign", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()},
	})
	require.NoError(t, err)
	defer foreign.Close()
	info, err := foreign.Info()
	require.NoError(t, err)
	foreignID, _ := info.ID()
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	dev, err := ns.Netlink().LinkByName(testns.Dev)
	require.NoError(t, err)
	const xdpFlagsDrvMode = 1 << 2
	setXDP := func(fd int) error {
		return ns.Do(func() error { return netlink.LinkSetXdpFdWithFlags(dev, fd, xdpFlagsDrvMode) })
	}

	t.Run("netlink-attached", func(t *testing.T) {
		require.NoError(t, setXDP(foreign.FD()))
		t.Cleanup(func() { setXDP(-1) })

		out, errOut := gatherOnce(t, asNobody(config(false)))
		t.Logf("replace = false:\n%s", errOut)
		require.Contains(t, out, "attached=false")
		require.Contains(t, errOut, fmt.Sprintf("interface already has XDP program id %d, which this process may not inspect (needs CAP_SYS_ADMIN): whose it is cannot be told", foreignID))
		require.NotContains(t, errOut, "not ours")
		require.NotContains(t, errOut, "another running instance")
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, uint32(foreignID), id, "left alone")

		out, errOut = gatherOnce(t, asNobody(config(true)))
		t.Logf("replace = true:\n%s", errOut)
		require.Contains(t, out, "attached=true", "stderr: %s", errOut)
		require.Contains(t, errOut, fmt.Sprintf("W! interface %q: replaced XDP program id %d (replace = true)", testns.Dev, foreignID))
		require.NotContains(t, errOut, "E! ")
		id, err = ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Zero(t, id, "the foreign program was removed, and ours detached at exit")
	})

	t.Run("bpf_link-attached", func(t *testing.T) {
		var l link.Link
		require.NoError(t, ns.Do(func() error {
			var err error
			l, err = link.AttachXDP(link.XDPOptions{Program: foreign, Interface: ns.DevIdx})
			return err
		}))
		defer l.Close()

		out, errOut := gatherOnce(t, asNobody(config(true)))
		t.Logf("replace = true:\n%s", errOut)
		require.Contains(t, out, "attached=false")
		require.Contains(t, errOut, fmt.Sprintf("replace = true, but removing XDP program id %d failed: remove XDP program %d: it is attached through a bpf_link, which only its owner or a process with CAP_SYS_ADMIN can detach, and this process lacks CAP_SYS_ADMIN", foreignID, foreignID))
		require.Contains(t, errOut, "bpftool link detach id")
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, uint32(foreignID), id, "left alone")
	})
}

// TestNamespaceUnderFileCapabilities: entering another network namespace
// needs CAP_SYS_ADMIN, which the file capabilities leave out, and XDP
// attaches only in the caller's own. As the service user, a config that
// names another namespace is refused at start with the reason and the
// supported way (a Telegraf started in that namespace); started in the
// namespace, as that way has it, the same config attaches.
func TestNamespaceUnderFileCapabilities(t *testing.T) {
	target := testns.New(t) // holds the interface
	elsewhere := testns.New(t)
	dir, bin := binarytest.CopyForOthers(t, binary, "")
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  namespace = %q\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev, target.Name)), 0o644))
	require.NoError(t, target.Do(func() error { return target.CheckAttachable(testns.Dev) }))
	asNobodyIn := func(ns *testns.NS) *exec.Cmd {
		return exec.Command("nsenter", "--net="+ns.Path, "--", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled")
	}

	refused := asNobodyIn(elsewhere)
	out, err := refused.CombinedOutput()
	t.Logf("%s\n%s", testns.Cmdline(refused), out)
	require.Error(t, err, "refused at start")
	require.Contains(t, string(out), fmt.Sprintf(`namespace = %q: entering another network namespace needs CAP_SYS_ADMIN, which this process lacks `+
		`(the package grants the binary only CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON), and XDP attaches only to the interfaces of the process's own namespace; `+
		`remove namespace and run a Telegraf instance inside that namespace instead: in its systemd unit (or a drop-in), NetworkNamespacePath=/var/run/netns/%s`,
		target.Name, target.Name))
	require.NotContains(t, string(out), "verifier log")
	require.NotContains(t, string(out), "xdp_drop_link")
	id, err := target.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "nothing attached")

	stdout, stderr := gatherOnce(t, asNobodyIn(target))
	t.Logf("in the namespace:\n%s", stderr)
	require.Contains(t, stdout, "attached=true", "stderr: %s", stderr)
	require.NotContains(t, stderr, "E! ")
}
