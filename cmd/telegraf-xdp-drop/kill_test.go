//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testns"
)

// TestSIGKILLAtRandomMoments kills the binary at a random moment of start-up,
// of a gather or of its stop, and checks that the interface never keeps an
// XDP program afterwards (handover_timeout = "0s": a stop that completes
// before the kill hands nothing over). XDP_DROP_KILL_TRIALS sets the number
// of trials.
func TestSIGKILLAtRandomMoments(t *testing.T) {
	trials := 12
	if v, err := strconv.Atoi(os.Getenv("XDP_DROP_KILL_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	ns := testns.New(t)
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev)
	phases := []string{"start-up", "gather", "stop"}
	attachedAtKill := 0
	for i := 0; i < trials; i++ {
		phase := phases[i%len(phases)]
		delay := time.Duration(rand.IntN(30000)) * time.Microsecond
		p := start(t, ns, config)
		switch phase {
		case "start-up":
			// Somewhere between exec and the attach completing.
		case "gather":
			waitAttached(t, ns, testns.Dev)
			_, err := io.WriteString(p.stdin, "\n")
			require.NoError(t, err)
			delay /= 10
		case "stop":
			waitAttached(t, ns, testns.Dev)
			require.NoError(t, p.stdin.Close())
			delay /= 30
		}
		time.Sleep(delay)
		if id, _ := ns.XDPProgramID(testns.Dev); id != 0 {
			attachedAtKill++
		}
		// In the stop phase the process may have exited on its own already.
		if err := p.cmd.Process.Kill(); err != nil {
			require.ErrorIs(t, err, os.ErrProcessDone)
		}
		p.wait(t, 5*time.Second)
		took, err := ns.WaitNoXDP(testns.Dev, time.Second)
		require.NoError(t, err, "trial %d: SIGKILL during %s after %v", i, phase, delay)
		if took > 500*time.Millisecond {
			t.Logf("trial %d: detach took %v", i, took)
		}
	}
	// The gather and stop phases kill after the attach: they must have counted.
	require.GreaterOrEqual(t, attachedAtKill, trials/3, "kills while attached")
	t.Logf("%d SIGKILL trials, %d with the program attached at the kill; none left an XDP program", trials, attachedAtKill)
}
