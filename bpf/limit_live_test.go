//go:build linux

package bpf_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// limitLive is a limit rule's program attached to a veth with 2 RX queues,
// and a generator to send through its peer.
type limitLive struct {
	ns      *testns.NS
	gen     *txgen.Generator
	p       *bpf.Program
	peerIdx int
	cpus    []int
}

func attachLimited(t *testing.T, l bpf.Limit) *limitLive {
	ns := testns.New(t)
	cpus, err := txgen.AllowedCPUs()
	require.NoError(t, err)
	if len(cpus) < 2 {
		t.Skip("needs 2 CPUs to send on 2 RX queues")
	}
	cpus = cpus[:2]
	devIdx, peerIdx, err := ns.AddVethQueues("xdpl0", "xdpl1", 2)
	require.NoError(t, err)
	gen, err := txgen.New()
	require.NoError(t, err)
	t.Cleanup(func() { gen.Close() })
	p, err := bpf.Load(bpf.Policy{Rules: []bpf.Rule{limitRule(l)}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	require.NoError(t, ns.Attach("xdpl0", func() error { return p.Attach(devIdx, bpf.ModeNative) }))
	return &limitLive{ns: ns, gen: gen, p: p, peerIdx: peerIdx, cpus: cpus}
}

// send sends the frames round robin at perSecond in all for d, from each of
// the CPUs given (an RX queue each), and returns how long it sent.
func (l *limitLive) send(frames [][]byte, perSecond int, d time.Duration, cpus []int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(cpus))
	start := time.Now()
	var last time.Time
	var mu sync.Mutex
	for i, cpu := range cpus {
		share := float64(perSecond) / float64(len(cpus))
		wg.Go(func() {
			errs[i] = l.ns.Do(func() error {
				return txgen.OnCPU(cpu, func() error {
					sent, next := 0, i
					for {
						elapsed := time.Since(start)
						if elapsed >= d {
							mu.Lock()
							if now := time.Now(); now.After(last) {
								last = now
							}
							mu.Unlock()
							return nil
						}
						due := int(share*elapsed.Seconds()) - sent
						if due <= 0 {
							time.Sleep(2 * time.Millisecond)
							continue
						}
						// Each frame of the round gets its share of the batch.
						per := max(due/len(frames), 1)
						for range frames {
							if err := l.gen.Send(l.peerIdx, frames[next%len(frames)], per); err != nil {
								return err
							}
							next++
							sent += per
						}
					}
				})
			})
		})
	}
	wg.Wait()
	return last.Sub(start), errors.Join(errs...)
}

// admitted waits for the frames in flight to be counted and returns the
// rule's frames within budget and in all.
func (l *limitLive) admitted(t *testing.T) (passed, decided uint64) {
	var b bpf.Block
	for prev := uint64(1<<64 - 1); ; prev = b.Rule[0].Packets {
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, l.p.ReadBlock(&b))
		if b.Rule[0].Packets == prev {
			return b.Rule[0].Packets - b.Limited[0].Packets, b.Rule[0].Packets
		}
	}
}

func checkAdmitted(t *testing.T, l *limitLive, lim bpf.Limit, took time.Duration) {
	passed, decided := l.admitted(t)
	want := float64(lim.Rate)*took.Seconds() + float64(lim.Burst)
	t.Logf("%d of %d frames passed in %v: want rate x t + burst = %.0f (%+.2f %%)", passed, decided, took.Round(time.Millisecond), want, 100*(float64(passed)/want-1))
	require.GreaterOrEqual(t, float64(decided), 5*want, "too few frames arrived to test the limit")
	require.InDelta(t, want, float64(passed), 0.1*want, "rate x t + burst within 10 %%")
}

// TestLimitLiveOneSource: one source at 10 times its rate for 5 s, on one
// RX queue, gets rate x 5 s + burst frames through, within 10 %.
func TestLimitLiveOneSource(t *testing.T) {
	lim := bpf.Limit{Rate: 1000, Burst: 2000, PrefixV4: 32, PrefixV6: 64}
	l := attachLimited(t, lim)
	took, err := l.send([][]byte{dnsFrom("198.51.100.1")}, 10*1000, 5*time.Second, l.cpus[:1])
	require.NoError(t, err)
	checkAdmitted(t, l, lim, took)
}

// TestLimitLiveTwoQueues: the same source spread over both RX queues, each
// run by its own CPU, gets its budget once, not once per queue.
func TestLimitLiveTwoQueues(t *testing.T) {
	lim := bpf.Limit{Rate: 1000, Burst: 2000, PrefixV4: 32, PrefixV6: 64}
	l := attachLimited(t, lim)
	took, err := l.send([][]byte{dnsFrom("198.51.100.1")}, 10*1000, 5*time.Second, l.cpus)
	require.NoError(t, err)
	checkAdmitted(t, l, lim, took)
}

// TestLimitLivePerRule: with per = "rule" the rule admits rate x t + burst
// in all, whatever the sources, over both queues.
func TestLimitLivePerRule(t *testing.T) {
	lim := bpf.Limit{Rate: 1000, Burst: 1000, PerRule: true}
	l := attachLimited(t, lim)
	srcs := [][]byte{dnsFrom("198.51.100.1"), dnsFrom("203.0.113.7"), dnsFrom("2001:db8::1")}
	took, err := l.send(srcs, 10*1000, 5*time.Second, l.cpus)
	require.NoError(t, err)
	checkAdmitted(t, l, lim, took)
}
