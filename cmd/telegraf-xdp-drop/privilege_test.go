//go:build linux

package main

import (
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

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testns"
)

const setcapCaps = "cap_bpf,cap_net_admin,cap_perfmon+ep"

// TestLeastPrivilege runs the binary as an unprivileged user: with the file
// capabilities make install grants it attaches and reports; without them it
// fails with the exact setcap command to run.
func TestLeastPrivilege(t *testing.T) {
	ns := testns.New(t)
	for _, tool := range []string{"setcap", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (Debian libcap2-bin, util-linux): %v", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "xdp-drop-cap")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "telegraf-xdp-drop")
	raw, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, raw, 0o755))
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev)), 0o644))
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))

	runAsNobody := func() (string, string) {
		cmd := ns.Exec("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled")
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		var stdout, stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Start())
		_, err = io.WriteString(stdin, "\n")
		require.NoError(t, err)
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(stdout.String(), "xdp_drop_link") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		stdin.Close()
		require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
		return stdout.String(), stderr.String()
	}

	out, errOut := runAsNobody()
	require.Contains(t, out, "attached=false")
	require.Contains(t, errOut, "E! ")
	require.Contains(t, errOut, "setcap "+setcapCaps+" "+bin, "the error prints the exact setcap command")

	// CAP_PERFMON is needed: the verifier refuses the program's
	// variable-offset packet pointer arithmetic without it.
	require.NoError(t, exec.Command("setcap", "cap_bpf,cap_net_admin+ep", bin).Run())
	out, errOut = runAsNobody()
	require.Contains(t, out, "attached=false")
	require.Contains(t, errOut, "CAP_PERFMON")

	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	out, errOut = runAsNobody()
	require.Contains(t, out, "attached=true", "stderr: %s", errOut)
	require.NotContains(t, errOut, "E! ")

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

// TestPinPathUnusableUnderFileCapabilities: with the file capabilities but
// a pin_path it cannot use, the binary still enforces the drop policy,
// without pins, and its warning names the command that fixes pinning.
func TestPinPathUnusableUnderFileCapabilities(t *testing.T) {
	ns := testns.New(t)
	dir, err := os.MkdirTemp("", "xdp-drop-cap")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "telegraf-xdp-drop")
	raw, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, raw, 0o755))
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	// A root-only directory on the BPF filesystem, as bpffs itself is.
	bpffsDir, err := os.MkdirTemp(bpf.DefaultBPFFS, "xdpdrop-pintest-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(bpffsDir) })
	pins := filepath.Join(bpffsDir, "pins")
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  pin_path = %q\n", testns.Dev, pins)), 0o644))
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	asNobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled"}

	cases := []struct {
		name string
		cmd  *exec.Cmd
		want string
	}{
		// nsenter keeps this mount namespace: the BPF filesystem is there,
		// but root-only.
		{"no permission", exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns.Name, "--"}, asNobody...)...),
			`may not pass through (` + regexp.QuoteMeta(bpf.DefaultBPFFS) + `|` + regexp.QuoteMeta(bpffsDir) + `) \(mode 1?700\); as root run: chmod o\+x `},
		// ip netns exec mounts a fresh /sys, without the BPF filesystem.
		{"no BPF filesystem", ns.Exec(asNobody[0], asNobody[1:]...),
			`no BPF filesystem on /sys/fs/bpf, and mounting one needs CAP_SYS_ADMIN, which this process lacks; as root run: mount -t bpf bpf /sys/fs/bpf`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut := gatherOnce(t, c.cmd)
			t.Logf("%s\n%s", testns.Cmdline(c.cmd), errOut)
			require.Contains(t, out, "attached=true", "the drop policy is enforced; stderr: %s", errOut)
			require.Regexp(t, `W! interface "`+testns.Dev+`": attaching without pins, so counters restart at every restart: pin_path unusable: .*`+c.want, errOut)
			require.NotContains(t, errOut, "E! ")
			_, err := os.Stat(pins)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing pinned")
		})
	}
}

// gatherOnce starts cmd, asks for one gather, closes stdin and returns what
// it printed.
func gatherOnce(t *testing.T, cmd *exec.Cmd) (string, string) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(stdin, "\n")
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "xdp_drop_link") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stdin.Close()
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	return stdout.String(), stderr.String()
}
