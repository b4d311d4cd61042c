//go:build linux

package bpf_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/frames"
	"github.com/xdp-drop/xdp_drop/internal/testns"
	"github.com/xdp-drop/xdp_drop/internal/traffic"
)

// loadFramesEnv overrides how many frames TestCountingUnderLoad sends.
const loadFramesEnv = "XDP_DROP_LOAD_FRAMES"

const (
	defaultLoadFrames = 1_000_000
	// loadRounds interleaves the flows: each round sends a share of every flow.
	loadRounds = 4
	// Tagged frames go 64 per BPF_PROG_TEST_RUN call, each call waiting for
	// an RCU grace period, so a tagged flow sends at most this many per round.
	loadTaggedPerRound = 4 * traffic.Batch
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

// TestCountingUnderLoad sends a mix at the full live-frames rate, from every
// CPU at once, through a veth into the attached program, and requires that
// each class counted exactly the frames the veth handed to XDP (its
// rx_packets): none lost, none double counted, whichever CPU ran the program.
// Frames the veth's ring had no room for never reach XDP; rx_dropped counts them.
func TestCountingUnderLoad(t *testing.T) {
	ns := testns.New(t)
	total := loadFrames(t)
	gen, err := traffic.NewGenerator()
	require.NoError(t, err)
	defer gen.Close()

	// Some flows dropped, some passed up the stack.
	p, err := bpf.Load(bpf.Policy{Protocols: []uint8{17, 1, 47}})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Do(func() error {
		if err := ns.CheckAttachable(testns.Dev); err != nil {
			return err
		}
		return p.Attach(ns.DevIdx, bpf.ModeNative)
	}))

	senders := min(runtime.NumCPU(), 4)
	var want, before, after bpf.Counters
	var sent, delivered uint64
	_, drop0, err := rxStats(ns)
	require.NoError(t, err)
	start := time.Now()
	for _, c := range loadPlan(total) {
		rx0, dropped0, err := rxStats(ns)
		require.NoError(t, err)
		require.NoError(t, p.ReadCounters(&before))

		require.NoError(t, sendParallel(ns, gen, c.flow.Frame, c.count, senders), c.flow.Name)
		rx1, _, err := settledRx(ns, rx0, dropped0, c.count)
		require.NoError(t, err)
		require.NoError(t, p.ReadCounters(&after))

		n := rx1 - rx0
		require.NotZero(t, n, "%s: no frame delivered", c.flow.Name)
		for cl := range after {
			w := before[cl]
			if bpf.Class(cl) == c.flow.Class {
				w.Packets += n
				w.Bytes += n * uint64(len(c.flow.Frame))
			}
			require.Equal(t, w, after[cl], "%s: class %d after %d frames sent, %d delivered", c.flow.Name, cl, c.count, n)
		}
		want[c.flow.Class].Packets += n
		want[c.flow.Class].Bytes += n * uint64(len(c.flow.Frame))
		sent += uint64(c.count)
		delivered += n
	}
	elapsed := time.Since(start)
	_, drop1, err := rxStats(ns)
	require.NoError(t, err)

	require.NoError(t, p.ReadCounters(&after))
	for cl := range want {
		require.Equal(t, want[cl], after[cl], "class %d", cl)
	}
	// rx_dropped also counts passed frames no protocol handler took (LLDP).
	t.Logf("%d frames sent from %d CPUs in %v (%.2f Mframes/s): %d delivered and counted, rx_dropped %d",
		sent, senders, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds()/1e6, delivered, drop1-drop0)
}

// sendParallel sends count copies of frame out of the peer veth, split over
// senders threads that each run in the namespace.
func sendParallel(ns *testns.NS, gen *traffic.Generator, frame []byte, count, senders int) error {
	var wg sync.WaitGroup
	errs := make([]error, senders)
	for i := range senders {
		n := count / senders
		if i == 0 {
			n += count % senders
		}
		if n == 0 {
			continue
		}
		wg.Go(func() {
			errs[i] = ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) })
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// rxStats returns the rx_packets and rx_dropped counters of the test veth:
// frames its NAPI handed to XDP, and frames it dropped, among them those
// that found its ring full.
func rxStats(ns *testns.NS) (packets, dropped uint64, err error) {
	l, err := ns.Netlink().LinkByName(testns.Dev)
	if err != nil {
		return 0, 0, err
	}
	s := l.Attrs().Statistics
	if s == nil {
		return 0, 0, errors.New("no statistics for " + testns.Dev)
	}
	return s.RxPackets, s.RxDropped, nil
}

// settledRx waits until the receiving NAPI is done with a send of count
// frames that started at rx0/drop0, and returns rx_packets and rx_dropped: they
// account for every frame (a test run a signal interrupted may send more)
// and have not moved for a while, or have stopped moving for longer.
func settledRx(ns *testns.NS, rx0, drop0 uint64, count int) (rx, dropped uint64, err error) {
	const quiet = 20 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	var lastRx, lastDrop uint64
	changed := time.Now()
	for {
		rx, dropped, err = rxStats(ns)
		if err != nil {
			return 0, 0, err
		}
		if rx != lastRx || dropped != lastDrop {
			lastRx, lastDrop, changed = rx, dropped, time.Now()
		}
		still := time.Since(changed)
		if still >= quiet && (rx-rx0+dropped-drop0 >= uint64(count) || still >= 5*quiet) {
			return rx, dropped, nil
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%s still receiving after 10s: %d of %d frames delivered", testns.Dev, rx-rx0, count)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
