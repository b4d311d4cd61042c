//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// observedConfig drops UDP and passes DNS by a rule.
func observedConfig(dryRun bool) string {
	return fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = [%q]
  drop = ["udp"]
  dry_run = %v
  handover_timeout = "0s"
  [[inputs.xdp_drop.rule]]
    name = "dns"
    action = "pass"
    protocol = ["udp"]
    dst_port = [53]
`, testns.Dev, dryRun)
}

// TestWatchBesideInstance runs the console view on an interface a running
// instance holds: it shows that instance's counters read-only, exact for
// the frames sent, names the instance's process and program, and leaves
// its attachment as it was, through the view and after it quits.
func TestWatchBesideInstance(t *testing.T) {
	ns := testns.New(t)
	conf := observedConfig(false)
	instance := start(t, ns, conf)
	id := waitAttached(t, ns, testns.Dev)

	udp := func(dport uint16) []byte {
		l4 := frames.Ports(frames.UDP(18), 40000, dport)
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, l4),
			netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("198.51.100.9")))
	}
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	send := func(frame []byte, n int) {
		require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) }))
	}
	send(udp(53), 11) // passed by the rule
	send(udp(9), 7)   // dropped by the drop list

	w := &watchView{cmd: ns.Exec(binary, "-config", writeConfig(t, conf), "-watch"), done: make(chan error, 1)}
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.errOut
	require.NoError(t, testproc.Tie(w.cmd).Start())
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() { w.cmd.Process.Kill() })

	const rates = `\s+[\d,]+\s+[\d.]+ [kMG]?B/s\s+`
	header := regexp.MustCompile(fmt.Sprintf(`(?m)^read-only xdpt0: counters of the instance of pid %d, program id %d$`,
		instance.cmd.Process.Pid, id))
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^xdp_drop watch  .*  \(only observes; Ctrl-C quits\)$`),
		header,
		regexp.MustCompile(`(?m)^xdpt0\s+ipv4\s+udp\s+drop` + rates + `7$`),
		regexp.MustCompile(`(?m)^xdpt0\s+ipv4\s+udp\s+pass` + rates + `11$`),
		regexp.MustCompile(`(?m)^xdpt0\s+dns\s+pass` + rates + `11$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^link xdpt0: read-only, native mode, program id %d \(not attached here\)$`, id)),
	}
	all := func(screen string) bool {
		for _, re := range want {
			if !re.MatchString(screen) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(testns.Hang)
	for !all(lastScreen(w.out.String())) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	screen := lastScreen(w.out.String())
	t.Logf("watch view:\n%s", screen)
	for _, re := range want {
		require.Regexp(t, re, screen, "stderr: %s", w.errOut.String())
	}
	// More traffic: the view follows the instance's counters.
	send(udp(9), 5)
	dropped := regexp.MustCompile(`(?m)^xdpt0\s+ipv4\s+udp\s+drop` + rates + `12$`)
	for !dropped.MatchString(lastScreen(w.out.String())) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.Regexp(t, dropped, lastScreen(w.out.String()))
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur, "the instance's program stays attached while the view runs")

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-w.done:
		require.NoError(t, err, "exit status after SIGINT; stderr: %s", w.errOut.String())
	case <-time.After(testns.Hang):
		t.Fatalf("watch view still running %v after SIGINT", testns.Hang)
	}
	require.NotContains(t, w.errOut.String(), "E! ")
	require.Contains(t, w.errOut.String(), fmt.Sprintf("I! interface %q: read-only: counters of program id %d, attached by process %d (telegraf-xdp-dr), read from the attached program", testns.Dev, id, instance.cmd.Process.Pid))
	for _, line := range strings.Split(w.out.String(), "\n") {
		require.LessOrEqual(t, len(line), width, "line wider than %d columns: %q", width, line)
	}

	// The instance still holds the interface, with the same program and
	// counters: nothing was detached, replaced or reset.
	cur, err = ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur, "the instance's program stays attached after the view quits")
	attached, gotID, packets := gatherState(t, instance, "udp", "drop")
	require.True(t, attached)
	require.Equal(t, int64(id), gotID)
	require.Equal(t, int64(12), packets, "the instance's own count of UDP dropped")
	require.NotContains(t, instance.stderr.String(), "E! ")
}

// TestWatchOtherConfig: beside an instance loaded from another config (a
// dry run, here), the view says so and exits 1, rather than showing its
// counters under the wrong actions; the instance is left attached.
func TestWatchOtherConfig(t *testing.T) {
	ns := testns.New(t)
	start(t, ns, observedConfig(true))
	id := waitAttached(t, ns, testns.Dev)

	cmd := ns.Exec(binary, "-config", writeConfig(t, observedConfig(false)), "-watch")
	out, err := runBounded(t, cmd)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output: %s", out)
	require.Equal(t, 1, exit.ExitCode(), "output: %s", out)
	require.Contains(t, out, fmt.Sprintf("E! interface %q: XDP program id %d (xdp_drop) was loaded from another config, or by another version: its constants dry_run, verdicts differ from this config's", testns.Dev, id))
	require.Contains(t, out, "run -watch with the config that instance runs")
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur, "left attached")
}

// TestWatchForeignProgram: on an interface another tool's XDP program
// holds, the view says it is not xdp_drop's and exits 1, leaving it.
func TestWatchForeignProgram(t *testing.T) {
	ns := testns.New(t)
	foreign, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "foreign", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()},
	})
	require.NoError(t, err)
	defer foreign.Close()
	var l link.Link
	require.NoError(t, ns.Attach(testns.Dev, func() error {
		l, err = link.AttachXDP(link.XDPOptions{Program: foreign, Interface: ns.DevIdx})
		return err
	}))
	defer l.Close()
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)

	cmd := ns.Exec(binary, "-config", writeConfig(t, observedConfig(false)), "-watch")
	out, err := runBounded(t, cmd)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output: %s", out)
	require.Equal(t, 1, exit.ExitCode(), "output: %s", out)
	require.Contains(t, out, fmt.Sprintf("E! interface %q: interface already has XDP program id %d (foreign): not xdp_drop's, so there are no counters to show, and it is left alone", testns.Dev, id))
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur, "left attached")
}

// runBounded runs cmd to its end, its output combined; a run longer than
// testns.Hang is a hang.
func runBounded(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	var out binarytest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, testproc.Tie(cmd).Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(testns.Hang):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running after %v: %s", testns.Hang, strings.TrimSpace(out.String()))
		return "", nil
	}
}

// TestWatchUnderFileCapabilities: with only the installed binary's file
// capabilities, which cannot open another process's program by its id
// (CAP_SYS_ADMIN), the view beside an instance says to run it as root and
// exits 1; it attaches nothing and the instance is left attached.
func TestWatchUnderFileCapabilities(t *testing.T) {
	out, id := runBesideUnderFileCapabilities(t, "-watch")
	require.Contains(t, out, fmt.Sprintf("E! interface %q: read the counters of the running instance: XDP program id %d: opening another process's XDP program by its id needs CAP_SYS_ADMIN: run -watch as root (sudo)", testns.Dev, id))
}

// runBesideUnderFileCapabilities runs the binary with view (-watch or
// -status) as nobody with only the installed binary's file capabilities,
// beside a running instance: it must exit 1 and leave the instance
// attached. It returns the output and the instance's program id.
func runBesideUnderFileCapabilities(t *testing.T, view string) (string, uint32) {
	t.Helper()
	ns := testns.New(t)
	start(t, ns, observedConfig(false))
	id := waitAttached(t, ns, testns.Dev)

	dir, bin := binarytest.CopyForOthers(t, binary, "")
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(observedConfig(false)), 0o644))

	cmd := ns.Exec("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, view)
	out, err := runBounded(t, cmd)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output: %s", out)
	require.Equal(t, 1, exit.ExitCode(), "output: %s", out)
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur, "left attached")
	return out, id
}

// TestWatchOutlivesInstance: when the observed instance stops, the view
// says the interface has no program and does not attach one itself (it
// would hold the interface against the instance's return); when an
// instance attaches again, the view shows its counters.
func TestWatchOutlivesInstance(t *testing.T) {
	ns := testns.New(t)
	conf := observedConfig(false)
	first := start(t, ns, conf)
	id := waitAttached(t, ns, testns.Dev)
	w := &watchView{cmd: ns.Exec(binary, "-config", writeConfig(t, conf), "-watch"), done: make(chan error, 1)}
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.errOut
	require.NoError(t, testproc.Tie(w.cmd).Start())
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() { w.cmd.Process.Kill() })
	waitScreen := func(re *regexp.Regexp) {
		t.Helper()
		deadline := time.Now().Add(testns.Hang)
		for !re.MatchString(lastScreen(w.out.String())) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		require.Regexp(t, re, lastScreen(w.out.String()), "stderr: %s", w.errOut.String())
	}
	waitScreen(regexp.MustCompile(fmt.Sprintf(`(?m)^link xdpt0: read-only, native mode, program id %d `, id)))

	require.NoError(t, first.stdin.Close())
	require.NoError(t, first.wait(t))
	waitScreen(regexp.MustCompile(`(?m)^link xdpt0: NOT attached: interface "xdpt0": no XDP program attached now`))
	for range 3 {
		time.Sleep(time.Second) // a few screens: none of them attaches
		cur, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Zero(t, cur, "the view attached to an interface it observed")
	}

	start(t, ns, conf)
	again := waitAttached(t, ns, testns.Dev)
	require.NotEqual(t, id, again)
	waitScreen(regexp.MustCompile(fmt.Sprintf(`(?m)^read-only xdpt0: counters of the instance of pid \d+, program id %d$`, again)))

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-w.done:
		require.NoError(t, err, "stderr: %s", w.errOut.String())
	case <-time.After(testns.Hang):
		t.Fatalf("watch view still running %v after SIGINT", testns.Hang)
	}
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, again, cur, "the second instance stays attached")
}
