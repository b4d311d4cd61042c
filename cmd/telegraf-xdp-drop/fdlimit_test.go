//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/plugins/parsers/influx"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// TestOutOfFileDescriptors runs the binary with RLIMIT_NOFILE far too low
// for its interfaces: those that do not fit report running out of file
// descriptors, with the limit and the need per interface, never "not
// found"; the others attach. Four limits in a row leave 0 to 3 descriptors
// for the first interface that does not fit, so each step of an attach
// (lookup, load, attach) runs out in one of them.
func TestOutOfFileDescriptors(t *testing.T) {
	for limit := 22; limit < 26; limit++ {
		t.Run(fmt.Sprint(limit), func(t *testing.T) { testOutOfFileDescriptors(t, limit) })
	}
}

func testOutOfFileDescriptors(t *testing.T, limit int) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Fatalf("prlimit is needed (Debian util-linux): %v", err)
	}
	ns := testns.New(t)
	var names []string
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("xdpf%d", i)
		_, _, err := ns.AddVeth(name, fmt.Sprintf("xdpq%d", i))
		require.NoError(t, err)
		names = append(names, name)
	}
	require.NoError(t, ns.Do(func() error {
		for _, name := range names {
			if err := ns.CheckAttachable(name); err != nil {
				return err
			}
		}
		return nil
	}))
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [\"%s\"]\n  drop = [\"all\"]\n", strings.Join(names, `", "`))
	cmd := exec.Command("prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "ip", "netns", "exec", ns.Name, binary, "-config", writeConfig(t, config), "-poll_interval_disabled")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &binarytest.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, testproc.Tie(cmd).Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	_, err = io.WriteString(stdin, "\n")
	require.NoError(t, err)

	parser := &influx.Parser{}
	require.NoError(t, parser.Init())
	var ms []telegraf.Metric
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for links := 0; links < len(names); {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "stdout closed; stderr: %s", stderr)
			m, err := parser.ParseLine(line)
			require.NoError(t, err)
			ms = append(ms, m)
			if m.Name() == "xdp_drop_link" {
				links++
			}
		case <-time.After(testns.Hang):
			t.Fatalf("no link points after %v; stderr: %s", testns.Hang, stderr)
		}
	}
	stdin.Close()
	for range lines {
	}
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr)

	attached, failed := 0, 0
	for _, m := range ms {
		if m.Name() != "xdp_drop_link" {
			continue
		}
		if a, _ := m.GetField("attached"); a == true {
			attached++
			continue
		}
		failed++
		e, _ := m.GetField("error")
		require.Contains(t, e, "too many open files")
		require.Contains(t, e, fmt.Sprintf("out of file descriptors: RLIMIT_NOFILE is %d (hard limit %d) and each attached interface holds 4; raise the hard limit", limit, limit))
		require.NotContains(t, e, "not found")
	}
	require.Equal(t, len(names), attached+failed)
	require.NotZero(t, attached, "stderr: %s", stderr)
	require.NotZero(t, failed, "the limit must bite; stderr: %s", stderr)
	require.NotContains(t, stderr.String(), "not found")
	t.Logf("%d attached, %d out of descriptors; first error: %s", attached, failed, firstError(stderr.String()))
}

func firstError(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "E! ") {
			return line
		}
	}
	return ""
}

// TestSoftFDLimitRaised: started with a soft RLIMIT_NOFILE below the hard
// one, the binary runs with the hard limit, so only the hard limit bounds
// the interfaces it can attach (the Go runtime alone stops one short).
func TestSoftFDLimitRaised(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	cmd := exec.Command("prlimit", "--nofile=64:1024", "ip", "netns", "exec", ns.Name, binary, "-config", writeConfig(t, dropAllConfig()), "-poll_interval_disabled")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, testproc.Tie(cmd).Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitAttached(t, ns, testns.Dev)
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", cmd.Process.Pid))
	require.NoError(t, err)
	require.Regexp(t, `Max open files\s+1024\s+1024\s+files`, string(limits))
	stdin.Close()
}
