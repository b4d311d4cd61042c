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

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// killSeedEnv replays the random delays of a failed TestSIGKILLAtRandomMoments.
const killSeedEnv = "XDP_DROP_KILL_SEED"

// killSeed returns the seed from XDP_DROP_KILL_SEED, or a fresh one.
func killSeed(t *testing.T) uint64 {
	s := os.Getenv(killSeedEnv)
	if s == "" {
		return rand.Uint64()
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an unsigned integer", killSeedEnv, s)
	}
	return seed
}

// TestSIGKILLAtRandomMoments kills the binary at a random moment of start-up,
// of a gather or of its stop, and checks that the interface never keeps an
// XDP program afterwards (handover_timeout = "0s": a stop that completes
// before the kill hands nothing over). XDP_DROP_KILL_TRIALS sets the number
// of trials; the seed of the random delays is logged, and XDP_DROP_KILL_SEED
// replays it.
func TestSIGKILLAtRandomMoments(t *testing.T) {
	trials := 12
	if v, err := strconv.Atoi(os.Getenv("XDP_DROP_KILL_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	seed := killSeed(t)
	t.Logf("random delays from seed %d (replay with %s=%d)", seed, killSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ns := testns.New(t)
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev)
	phases := []string{"start-up", "gather", "stop"}
	attachedAtKill := 0
	for i := 0; i < trials; i++ {
		phase := phases[i%len(phases)]
		delay := time.Duration(rng.IntN(30000)) * time.Microsecond
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
		time.Sleep(delay) // the random moment itself, not a wait for anything
		if id, _ := ns.XDPProgramID(testns.Dev); id != 0 {
			attachedAtKill++
		}
		// In the stop phase the process may have exited on its own already.
		if err := p.cmd.Process.Kill(); err != nil {
			require.ErrorIs(t, err, os.ErrProcessDone)
		}
		p.wait(t)
		requireDetached(t, ns, fmt.Sprintf("trial %d: SIGKILL during %s after %v (seed %d)", i, phase, delay, seed))
	}
	// The gather and stop phases kill after the attach: they must have counted.
	require.GreaterOrEqual(t, attachedAtKill, trials/3, "kills while attached (seed %d)", seed)
	t.Logf("%d SIGKILL trials, %d with the program attached at the kill; none left an XDP program", trials, attachedAtKill)
}
