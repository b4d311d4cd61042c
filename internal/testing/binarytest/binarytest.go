// Package binarytest starts the telegraf-xdp-drop binary for tests, as
// Telegraf's execd would: a runner that reads its stdout line by line and
// keeps its stderr, and a copy of the binary another user can run (for
// file capabilities and the service user).
package binarytest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// Buffer collects a child's output while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is a started binary: its stdin, its stdout's lines, its stderr.
type Proc struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Lines  <-chan string // closed when stdout ends
	Stderr *Buffer
	Done   <-chan struct{} // closed when the process has exited
	err    error
}

// Err is the exit status, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Start starts cmd with pipes to its stdin and stdout; lines beyond buffer
// wait for the test to read them. The process is killed, and waited for,
// when the test ends.
func Start(t testing.TB, cmd *exec.Cmd, buffer int) *Proc {
	t.Helper()
	lines := make(chan string, buffer)
	done := make(chan struct{})
	p := &Proc{Cmd: cmd, Lines: lines, Stderr: &Buffer{}, Done: done}
	var err error
	p.Stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = p.Stderr
	require.NoError(t, testproc.Tie(cmd).Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		// Wait only after stdout is read to its end, as os/exec requires.
		p.err = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return p
}

// CopyForOthers copies the binary bin into a new directory under parent
// ("" for the default temporary directory) that every user may enter, as
// a file every user may run, and returns the directory and the copy; both
// are removed when the test ends. The copy is for file capabilities
// (setcap) and for running as another user.
func CopyForOthers(t testing.TB, bin, parent string) (dir, path string) {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "xdp-drop-cap")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	path = filepath.Join(dir, filepath.Base(bin))
	raw, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o755))
	return dir, path
}
