//go:build linux

package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startGobgpd runs Debian's gobgpd on a loopback port of its own, AS
// 65000, waiting for AS 65001 from 127.0.0.1; it returns its BGP port and
// its command line (gobgp's arguments).
func startGobgpd(t *testing.T) (int, func(args ...string)) {
	t.Helper()
	if _, err := exec.LookPath("gobgpd"); err != nil {
		if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
			t.Fatal("gobgpd not installed (apt-get install gobgpd)")
		}
		t.Skip("gobgpd not installed (apt-get install gobgpd)")
	}
	port, grpc := freeLoopbackPort(t), freeLoopbackPort(t)
	var b strings.Builder
	fmt.Fprintf(&b, "[global.config]\n  as = 65000\n  router-id = \"10.255.0.1\"\n  port = %d\n  local-address-list = [\"127.0.0.1\"]\n", port)
	b.WriteString("[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"127.0.0.1\"\n    peer-as = 65001\n")
	b.WriteString("  [neighbors.transport.config]\n    passive-mode = true\n  [neighbors.timers.config]\n    connect-retry = 1\n")
	b.WriteString("  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"ipv4-flowspec\"\n")
	conf := filepath.Join(t.TempDir(), "gobgpd.toml")
	require.NoError(t, os.WriteFile(conf, []byte(b.String()), 0o600))
	var logs bytes.Buffer
	cmd := testproc.Command("gobgpd", "-f", conf, "--api-hosts", fmt.Sprintf("127.0.0.1:%d", grpc), "-p", "--pprof-disable")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	cli := func(args ...string) {
		t.Helper()
		var out []byte
		var err error
		for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			out, err = exec.Command("gobgp", append([]string{"-u", "127.0.0.1", "-p", strconv.Itoa(grpc)}, args...)...).CombinedOutput()
			if err == nil {
				return
			}
		}
		require.NoError(t, err, "gobgp %v: %s; gobgpd: %s", args, out, &logs)
	}
	return port, cli
}

// childrenOf lists the processes pid started (every thread's).
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	require.NoError(t, err)
	var out []int
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(s)
			out = append(out, n)
		}
	}
	return out
}

// rssKiB reads a process's resident set (VmRSS), or another line of its
// status (RssAnon: not the binary's pages, which the two processes share).
func rssKiB(t *testing.T, pid int) int { return statusKiB(t, pid, "VmRSS:") }

func statusKiB(t *testing.T, pid int, key string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no %s for %d", key, pid)
	return 0
}

// TestBinaryFlowSpecSpeaker: the binary runs its BGP speaker as a process
// of its own (itself, re-executed), which holds the session; killed, it is
// restarted and the session comes back; the binary stopping, it exits.
func TestBinaryFlowSpecSpeaker(t *testing.T) {
	port, gobgp := startGobgpd(t)
	ns := testns.New(t)
	p := startHere(t, ns, fmt.Sprintf(`[[inputs.xdp_drop]]
  namespace = %q
  interfaces = [%q]
  drop = ["gre"]
  [inputs.xdp_drop.flowspec]
    local_as = 65001
    router_id = "192.0.2.10"
    only_local_destinations = false
    [[inputs.xdp_drop.flowspec.peer]]
      address = "127.0.0.1"
      port = %d
      peer_as = 65000
`, ns.Name, testns.Dev, port))
	// Every gather from the rule's announcement on must show it in force.
	ruleSeen, gathers, ruleMissing := false, 0, 0
	established := func() bool {
		up, rule := false, false
		for _, m := range p.gather(t, testns.Dev) {
			switch m.Name() {
			case "xdp_drop_flowspec_peer":
				st, _ := m.GetField("state")
				up = st == "established"
			case "xdp_drop_flowspec":
				rule = true
			}
		}
		ruleSeen = ruleSeen || rule
		if ruleSeen {
			gathers++
			if !rule {
				ruleMissing++
			}
		}
		return up
	}
	waitEstablished := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(testns.Hang); !established(); time.Sleep(100 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "%s: the session is not established; stderr: %s", what, p.stderr)
		}
	}
	waitEstablished("at start")
	gobgp("global", "rib", "-a", "ipv4-flowspec", "add", "match", "destination", "10.9.0.1/32", "protocol", "udp", "then", "discard")
	for deadline := time.Now().Add(testns.Hang); !ruleSeen; time.Sleep(100 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the rule is not in force; stderr: %s", p.stderr)
		established()
	}
	kids := childrenOf(t, p.cmd.Process.Pid)
	require.Len(t, kids, 1, "one speaker process")
	speaker := kids[0]
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", speaker))
	require.NoError(t, err)
	require.Contains(t, string(cmdline), "[flowspec]")
	time.Sleep(2 * time.Second) // idle
	t.Logf("RSS with one session, idle: plugin %d KiB (anonymous %d), speaker %d KiB (anonymous %d)",
		rssKiB(t, p.cmd.Process.Pid), statusKiB(t, p.cmd.Process.Pid, "RssAnon:"), rssKiB(t, speaker), statusKiB(t, speaker, "RssAnon:"))

	require.NoError(t, syscall.Kill(speaker, syscall.SIGKILL))
	for deadline := time.Now().Add(testns.Hang); ; time.Sleep(100 * time.Millisecond) {
		if k := childrenOf(t, p.cmd.Process.Pid); len(k) == 1 && k[0] != speaker {
			break
		}
		require.True(t, time.Now().Before(deadline), "no new speaker; stderr: %s", p.stderr)
	}
	waitEstablished("after the speaker was killed")
	time.Sleep(1500 * time.Millisecond) // past the adoption's end
	established()
	require.Zero(t, ruleMissing, "gathers without the rule in force, of %d", gathers)
	t.Logf("the rule in force at each of %d gathers", gathers)
	require.Contains(t, p.stderr.String(), "E! flowspec: the BGP speaker died: signal: killed; restarting in 1s; the rules in force stay")
	speaker = childrenOf(t, p.cmd.Process.Pid)[0]

	require.NoError(t, p.stdin.Close())
	require.NoError(t, p.wait(t))
	_, err = os.Stat(fmt.Sprintf("/proc/%d", speaker))
	require.True(t, os.IsNotExist(err), "the speaker process %d outlived the binary", speaker)
}
