//go:build linux

package bpf_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// loadFramesEnv overrides how many frames TestCountingUnderLoad sends.
const loadFramesEnv = "XDP_DROP_LOAD_FRAMES"

// The load test's veth, with an RX queue per CPU.
const (
	loadDev  = "xdpl0"
	loadPeer = "xdpl1"
)

const (
	defaultLoadFrames = 1_000_000
	// loadRounds interleaves the flows: each round sends a share of every flow.
	loadRounds = 4
	// Tagged frames go 64 per BPF_PROG_TEST_RUN call, each call waiting for
	// an RCU grace period, so a tagged flow sends at most this many per round.
	loadTaggedPerRound = 4 * txgen.Batch
)

func loadFrames(t *testing.T) int {
	s := os.Getenv(loadFramesEnv)
	if s == "" {
		return defaultLoadFrames
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number of frames", loadFramesEnv, s)
	}
	return n
}

// loadChunk is one flow's share of one round.
type loadChunk struct {
	flow  traffic.Flow
	count int
}

// loadPlan spreads total frames over the flows of traffic.Mix in proportion to
// their counts, tagged flows capped (the rest goes to the untagged ones), and
// interleaves them over loadRounds rounds.
func loadPlan(total int) []loadChunk {
	mix := traffic.Mix()
	perRound := total / loadRounds
	weight, untaggedWeight := 0, 0
	for _, f := range mix {
		weight += f.Count
		if !isTagged(f.Frame) {
			untaggedWeight += f.Count
		}
	}
	share := make(map[string]int)
	untagged := perRound
	for _, f := range mix {
		if isTagged(f.Frame) {
			share[f.Name] = max(1, min(perRound*f.Count/weight, loadTaggedPerRound))
			untagged -= share[f.Name]
		}
	}
	for _, f := range mix {
		if !isTagged(f.Frame) {
			share[f.Name] = max(1, untagged*f.Count/untaggedWeight)
		}
	}
	var plan []loadChunk
	for r := range loadRounds {
		for i := range mix {
			// Rotate the order so that no flow always follows the same one.
			f := mix[(i+r)%len(mix)]
			plan = append(plan, loadChunk{flow: f, count: share[f.Name]})
		}
	}
	return plan
}

func isTagged(frame []byte) bool {
	et := binary.BigEndian.Uint16(frame[12:])
	return et == frames.Ether8021Q || et == frames.Ether8021AD
}

// TestCountingUnderLoad sends a mix at the full live-frames rate, from up to
// four CPUs at once, through a veth into the attached program, and requires
// that each class counted exactly the frames that reached it: the frames the
// generator transmitted (its own count) less those the kernel refused at a
// full ring (the sending peer's tx_dropped). Nothing lost, nothing double
// counted, whichever CPU ran the program; and at least half of what was sent
// must have arrived, or the test would prove little.
//
// Each sender is bound to its CPU and the veth has an RX queue per CPU, so
// the program runs on every sending CPU at once, and each sender drains its
// own queue as it fills it: however loaded the machine, frames are refused
// only by the rare ring overflow, not by CPUs starving each other.
func TestCountingUnderLoad(t *testing.T) {
	ns := testns.New(t)
	total := loadFrames(t)
	cpus, err := txgen.AllowedCPUs()
	require.NoError(t, err)
	cpus = cpus[:min(len(cpus), 4)]
	devIdx, peerIdx, err := ns.AddVethQueues(loadDev, loadPeer, cpus[len(cpus)-1]+1)
	require.NoError(t, err)
	gen, err := txgen.NewCounting()
	require.NoError(t, err)
	defer gen.Close()

	// Some flows dropped, some passed up the stack.
	p, err := bpf.Load(bpf.Policy{Protocols: []uint8{17, 1, 47}})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Attach(loadDev, func() error { return p.Attach(devIdx, bpf.ModeNative) }))

	var want, before, after bpf.Counters
	var sent, delivered uint64
	start := time.Now()
	for _, c := range loadPlan(total) {
		sent0, refused0, err := sentAndRefused(ns, gen)
		require.NoError(t, err)
		require.NoError(t, p.ReadCounters(&before))

		require.NoError(t, sendParallel(ns, gen, peerIdx, c.flow.Frame, c.count, cpus), c.flow.Name)
		sent1, refused1, err := sentAndRefused(ns, gen)
		require.NoError(t, err)
		s, n := sent1-sent0, (sent1-sent0)-(refused1-refused0)
		require.GreaterOrEqual(t, s, uint64(c.count), "%s: the generator sent fewer frames than asked", c.flow.Name)
		require.GreaterOrEqual(t, 2*n, s, "%s: only %d of %d frames reached %s; under half proves little", c.flow.Name, n, s, loadDev)

		w := before
		w[c.flow.Class].Packets += n
		w[c.flow.Class].Bytes += n * uint64(len(c.flow.Frame))
		// The receiving NAPI may still run after the senders return.
		require.NoError(t, waitClass(p, &after, c.flow.Class, w[c.flow.Class].Packets), "%s: %d frames sent, %d refused", c.flow.Name, s, s-n)
		for cl := range after {
			require.Equal(t, w[cl], after[cl], "%s: class %d after %d frames sent, %d delivered", c.flow.Name, cl, s, n)
		}
		want[c.flow.Class].Packets += n
		want[c.flow.Class].Bytes += n * uint64(len(c.flow.Frame))
		sent += s
		delivered += n
	}
	elapsed := time.Since(start)

	require.NoError(t, p.ReadCounters(&after))
	for cl := range want {
		require.Equal(t, want[cl], after[cl], "class %d", cl)
	}
	t.Logf("%d frames sent from %d CPUs in %v (%.2f Mframes/s): %d delivered and counted, %d refused at the full ring",
		sent, len(cpus), elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds()/1e6, delivered, sent-delivered)
}

// sentAndRefused returns the frames the generator has transmitted and the
// frames the test veth's ring had no room for, which the kernel counts as
// tx_dropped of the sending peer. Frames the stack drops after a pass (LLDP,
// which no protocol takes) count in the receiver's rx_dropped instead, so
// they do not blur this count.
func sentAndRefused(ns *testns.NS, gen *txgen.Generator) (sent, refused uint64, err error) {
	sent, err = gen.Sent()
	if err != nil {
		return 0, 0, err
	}
	s, err := ns.Stats(loadPeer)
	if err != nil {
		return 0, 0, err
	}
	return sent, s.TxDropped, nil
}

// waitClass reads the counters into c until class has counted want packets;
// more than want, or no progress to it for testns.Hang, is an error.
func waitClass(p *bpf.Program, c *bpf.Counters, class bpf.Class, want uint64) error {
	deadline := time.Now().Add(testns.Hang)
	for {
		if err := p.ReadCounters(c); err != nil {
			return err
		}
		got := c[class].Packets
		if got == want {
			return nil
		}
		if got > want {
			return fmt.Errorf("class %d counted %d packets, more than the %d that arrived", class, got, want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("class %d counted %d of %d packets after %v", class, got, want, testns.Hang)
		}
		time.Sleep(time.Millisecond)
	}
}

// sendParallel sends count copies of frame out of the peer peerIdx, split
// over one thread per CPU, each bound to its CPU inside the namespace.
func sendParallel(ns *testns.NS, gen *txgen.Generator, peerIdx int, frame []byte, count int, cpus []int) error {
	var wg sync.WaitGroup
	errs := make([]error, len(cpus))
	for i, cpu := range cpus {
		n := count / len(cpus)
		if i == 0 {
			n += count % len(cpus)
		}
		if n == 0 {
			continue
		}
		wg.Go(func() {
			errs[i] = ns.Do(func() error {
				return txgen.OnCPU(cpu, func() error { return gen.Send(peerIdx, frame, n) })
			})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
