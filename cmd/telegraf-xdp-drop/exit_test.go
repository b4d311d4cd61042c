//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// waitLog waits until the binary's stderr holds want: stderr is copied
// apart from stdout, so a line may arrive after the points that follow it.
func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	for deadline := time.Now().Add(testns.Hang); !strings.Contains(p.stderr.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr lacks %q after %v: %s", want, testns.Hang, p.stderr)
		}
	}
}

func dropAllConfig() string {
	// handover_timeout = "0s": a stop detaches at once, nothing is held.
	return fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev)
}

// TestOverlongStdinLine: a stdin line far over 64 KiB is discarded with a
// warning; the binary stays attached and gathers at the next line. Then
// closing stdin stops it with exit code 0 and says so in its last line.
func TestOverlongStdinLine(t *testing.T) {
	ns := testns.New(t)
	p := start(t, ns, dropAllConfig())
	id := waitAttached(t, ns, testns.Dev)
	p.gather(t, testns.Dev)

	_, err := io.WriteString(p.stdin, strings.Repeat("x", 200<<10)+"\n")
	require.NoError(t, err)
	ms := p.gather(t, testns.Dev)
	link := ms[len(ms)-1].Fields()
	require.Equal(t, true, link["attached"], "still attached, still gathering")
	require.Equal(t, int64(id), link["program_id"])
	waitLog(t, p, "W! stdin: discarded a line of 204801 bytes (over 65536); inputs.execd sends empty lines to ask for a gather")

	require.NoError(t, p.stdin.Close())
	require.NoError(t, p.wait(t), "exit status; stderr: %s", p.stderr)
	require.Equal(t, "I! stopped: stdin closed (inputs.execd closes it to stop the plugin)", lastLine(p.stderr.String()))
	requireDetached(t, ns, "stdin closed")
}

// TestExitReasonLogged: every way the binary stops ends with a log line
// that says why, and the exit code tells an orderly stop from a failure.
func TestExitReasonLogged(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ns := testns.New(t)
			p := start(t, ns, dropAllConfig())
			waitAttached(t, ns, testns.Dev)
			p.gather(t, testns.Dev)
			require.NoError(t, p.cmd.Process.Signal(sig))
			require.NoError(t, p.wait(t), "exit status; stderr: %s", p.stderr)
			name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
			require.Equal(t, "I! stopped: received "+name, lastLine(p.stderr.String()))
		})
	}
	t.Run("stdout closed", func(t *testing.T) {
		ns := testns.New(t)
		require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
		cmd := ns.Exec(binary, "-config", writeConfig(t, dropAllConfig()), "-poll_interval_disabled")
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		r, w, err := os.Pipe()
		require.NoError(t, err)
		cmd.Stdout = w
		stderr := &binarytest.Buffer{}
		cmd.Stderr = stderr
		require.NoError(t, testproc.Tie(cmd).Start())
		t.Cleanup(func() { cmd.Process.Kill() })
		w.Close()
		waitAttached(t, ns, testns.Dev)
		r.Close() // nobody reads the metrics any more
		_, err = io.WriteString(stdin, "\n")
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(testns.Hang):
			t.Fatalf("still running %v after its stdout was closed; stderr: %s", testns.Hang, stderr)
		}
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "exit status %v; stderr: %s", err, stderr)
		require.Equal(t, 1, exit.ExitCode(), "stderr: %s", stderr)
		require.Contains(t, stderr.String(), "W! failed to write metric: write /dev/stdout: broken pipe")
		require.Equal(t, "E! stopped: writing metrics to stdout failed (see the warning above); is the reading end closed?", lastLine(stderr.String()))
	})
}
