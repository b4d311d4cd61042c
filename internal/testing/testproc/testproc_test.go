//go:build linux

package testproc_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

const helperEnv = "XDP_DROP_TESTPROC_HELPER"

// The chains tests start: a program, one that execs it, and one that forks
// it and passes the signal on.
var chains = [][]string{
	{"sleep", "600"},
	{"sh", "-c", "exec sleep 600"},
	{"unshare", "--kill-child", "--", "sleep", "600"},
}

// TestDiesWithTestProcess: a test process that starts its helpers with
// Command and is then killed (no t.Cleanup runs) leaves none of them behind.
func TestDiesWithTestProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "1" {
		startAndHang(t)
		return
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestDiesWithTestProcess$")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	t.Cleanup(func() { parent.Process.Kill(); parent.Wait() })

	// One line per chain: the pid of the process that runs sleep.
	var sleepers []int
	sc := bufio.NewScanner(out)
	for len(sleepers) < len(chains) && sc.Scan() {
		pid, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "sleeper "))
		if err == nil {
			sleepers = append(sleepers, pid)
		}
	}
	require.Len(t, sleepers, len(chains), "the helper's sleepers")
	for _, pid := range sleepers {
		require.True(t, alive(pid), "sleeper %d runs while the test process does", pid)
	}

	require.NoError(t, parent.Process.Signal(syscall.SIGKILL))
	parent.Wait()
	for i, pid := range sleepers {
		deadline := time.Now().Add(time.Minute)
		for alive(pid) {
			require.True(t, time.Now().Before(deadline), "%v (pid %d) outlived the killed test process", chains[i], pid)
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// startAndHang is the killed test process: it starts each chain and prints
// the pid of its sleep, then waits to be killed.
func startAndHang(t *testing.T) {
	for _, c := range chains {
		cmd := testproc.Command(c[0], c[1:]...)
		require.NoError(t, cmd.Start())
		pid := cmd.Process.Pid
		if c[0] == "unshare" {
			pid = childOf(t, pid)
		}
		fmt.Printf("sleeper %d\n", pid)
	}
	time.Sleep(time.Hour)
}

// childOf waits for pid's one child and returns it.
func childOf(t *testing.T, pid int) int {
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			child, err := strconv.Atoi(f[0])
			require.NoError(t, err)
			return child
		}
		require.True(t, time.Now().Before(deadline), "pid %d started no child", pid)
		time.Sleep(10 * time.Millisecond)
	}
}

// alive says whether pid runs and is not a zombie waiting for its reaper.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}
