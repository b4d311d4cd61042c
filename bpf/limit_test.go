//go:build linux

package bpf_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// limitRule is a limit rule on UDP to port 53.
func limitRule(l bpf.Limit) bpf.Rule {
	return bpf.Rule{Name: "dns", Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53)), Limit: &l}
}

// dnsFrom is a DNS query frame from src.
func dnsFrom(src string) []byte {
	dst := "192.0.2.53"
	if len(src) > 0 && src[0] == '2' && src[1] != '0' && src[1] != '1' && src[1] != '2' {
		dst = "2001:db8::53"
	}
	return ruleFrame{src: src, dst: dst, proto: frames.ProtoUDP, sport: 40000, dport: 53}.build()
}

// limitClock is a program loaded with the test clock, and the clock.
type limitClock struct {
	t   *testing.T
	p   *bpf.Program
	now time.Duration
}

func loadLimited(t *testing.T, policy bpf.Policy) *limitClock {
	t.Helper()
	testns.RequirePrivileged(t)
	restore := bpf.UseLimitClock()
	p, err := bpf.Load(policy)
	restore()
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c := &limitClock{t: t, p: p}
	c.advance(time.Hour) // not 0: a real clock is far from it too
	return c
}

func (c *limitClock) advance(d time.Duration) {
	c.now += d
	require.NoError(c.t, bpf.SetLimitClock(c.p, uint64(c.now)))
}

// send runs n copies of frame and counts the verdicts.
func (c *limitClock) send(frame []byte, n int) (passed, dropped int) {
	for range n {
		v, err := c.p.XDP().Run(&ebpf.RunOptions{Data: frame})
		require.NoError(c.t, err)
		switch v {
		case xdpPass:
			passed++
		case xdpDrop:
			dropped++
		default:
			c.t.Fatalf("verdict %d", v)
		}
	}
	return passed, dropped
}

type limitStep struct {
	name          string
	advance       time.Duration
	src           string
	n             int
	passed, limit int // frames passed, frames over budget (dropped unless dry run)
}

func runLimitSteps(t *testing.T, policy bpf.Policy, steps []limitStep) {
	c := loadLimited(t, policy)
	var sent, over, bytes, overBytes uint64
	for _, s := range steps {
		c.advance(s.advance)
		frame := dnsFrom(s.src)
		passed, dropped := c.send(frame, s.n)
		if policy.DryRun {
			require.Equal(t, s.n, passed, "%s: a dry run passes every frame", s.name)
		} else {
			require.Equal(t, [2]int{s.passed, s.limit}, [2]int{passed, dropped}, "%s: passed, dropped", s.name)
		}
		sent += uint64(s.n)
		bytes += uint64(s.n * len(frame))
		over += uint64(s.limit)
		overBytes += uint64(s.limit * len(frame))
		var b bpf.Block
		require.NoError(t, c.p.ReadBlock(&b))
		require.Equal(t, bpf.Counter{Packets: sent, Bytes: bytes}, b.Rule[0], "%s: rule counter", s.name)
		require.Equal(t, bpf.Counter{Packets: over, Bytes: overBytes}, b.Limited[0], "%s: over budget", s.name)
		var udp [bpf.ActionCount]bpf.Counter
		for _, cl := range []bpf.Class{bpf.IPv4Class(frames.ProtoUDP), bpf.IPv6Class(frames.ProtoUDP)} {
			for a := range udp {
				udp[a].Packets += b.Class[cl][a].Packets
			}
		}
		require.Equal(t, [2]uint64{sent - over, over}, [2]uint64{udp[bpf.ActionPass].Packets, udp[bpf.ActionDrop].Packets},
			"%s: classes count by the real verdict", s.name)
	}
}

// TestLimitPerSource: each source gets burst frames at once and one frame
// per interval after; a source's silence earns it no more than burst; other
// sources, and those grouped apart by the prefix, have budgets of their own.
func TestLimitPerSource(t *testing.T) {
	policy := bpf.Policy{Protocols: []uint8{frames.ProtoTCP}, Rules: []bpf.Rule{
		limitRule(bpf.Limit{Rate: 10, Burst: 5, PrefixV4: 24, PrefixV6: 64}),
	}}
	runLimitSteps(t, policy, []limitStep{
		{"burst", 0, "198.51.100.1", 8, 5, 3},
		{"same /24", 0, "198.51.100.200", 2, 0, 2},
		{"another /24", 0, "198.51.101.1", 6, 5, 1},
		{"half an interval", 50 * time.Millisecond, "198.51.100.1", 2, 0, 2},
		{"one interval", 50 * time.Millisecond, "198.51.100.1", 2, 1, 1},
		{"three intervals", 300 * time.Millisecond, "198.51.100.1", 4, 3, 1},
		{"silence earns burst only", time.Minute, "198.51.100.1", 9, 5, 4},
		{"ipv6", 0, "2001:db8:1:2::1", 7, 5, 2},
		{"same /64", 0, "2001:db8:1:2::ffff", 1, 0, 1},
		{"another /64", 0, "2001:db8:1:3::1", 5, 5, 0},
	})
}

// TestLimitPerRule: every source shares the rule's one budget.
func TestLimitPerRule(t *testing.T) {
	policy := bpf.Policy{Rules: []bpf.Rule{limitRule(bpf.Limit{Rate: 1000, Burst: 3, PerRule: true})}}
	runLimitSteps(t, policy, []limitStep{
		{"burst", 0, "198.51.100.1", 2, 2, 0},
		{"another source shares it", 0, "203.0.113.9", 3, 1, 2},
		{"ipv6 too", 0, "2001:db8::1", 1, 0, 1},
		{"ten intervals", 10 * time.Millisecond, "2001:db8::1", 20, 3, 17},
		{"two intervals", 2 * time.Millisecond, "198.51.100.7", 6, 2, 4},
	})
}

// TestLimitDryRun: over budget is counted as would_drop and passed.
func TestLimitDryRun(t *testing.T) {
	policy := bpf.Policy{DryRun: true, Rules: []bpf.Rule{limitRule(bpf.Limit{Rate: 10, Burst: 2, PrefixV4: 32, PrefixV6: 128})}}
	runLimitSteps(t, policy, []limitStep{
		{"burst", 0, "198.51.100.1", 5, 2, 3},
		{"later", time.Second, "198.51.100.1", 5, 2, 3},
	})
}

// TestLimitAfterRules: a limit rule decides only the frames no earlier
// rule took, and frames it does not match go on to the later rules.
func TestLimitAfterRules(t *testing.T) {
	c := loadLimited(t, bpf.Policy{DropAll: true, Rules: []bpf.Rule{
		{Name: "trusted", Protocols: []uint8{frames.ProtoUDP}, SrcPrefixes: prefixes("192.0.2.0/24")},
		limitRule(bpf.Limit{Rate: 1, Burst: 1, PrefixV4: 32, PrefixV6: 128}),
		{Name: "udp", Protocols: []uint8{frames.ProtoUDP}},
	}})
	p, d := c.send(dnsFrom("192.0.2.1"), 4)
	require.Equal(t, [2]int{4, 0}, [2]int{p, d}, "trusted")
	p, d = c.send(dnsFrom("198.51.100.1"), 4)
	require.Equal(t, [2]int{1, 3}, [2]int{p, d}, "limited")
	other := ruleFrame{src: "198.51.100.1", dst: "192.0.2.53", proto: frames.ProtoUDP, sport: 1, dport: 54}.build()
	p, d = c.send(other, 2)
	require.Equal(t, [2]int{2, 0}, [2]int{p, d}, "not port 53: the udp rule passes it")
	var b bpf.Block
	require.NoError(t, c.p.ReadBlock(&b))
	require.Equal(t, []uint64{4, 4, 2}, []uint64{b.Rule[0].Packets, b.Rule[1].Packets, b.Rule[2].Packets})
	require.Equal(t, []uint64{0, 3, 0}, []uint64{b.Limited[0].Packets, b.Limited[1].Packets, b.Limited[2].Packets})
}

// TestLimitManySources: a source at half its rate keeps every frame while
// 100,000 other sources, each under its rate, and one source at 20 times
// its rate send at the same time, over 2 s of the test clock in 10 ms steps.
// The sketch's cells are shared: this is the bound on false limits at work.
func TestLimitManySources(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 2.2 million frames")
	}
	const rate = 100
	c := loadLimited(t, bpf.Policy{Rules: []bpf.Rule{limitRule(bpf.Limit{Rate: rate, Burst: rate, PrefixV4: 32, PrefixV6: 128})}})
	legit, heavy := dnsFrom("198.51.100.1"), dnsFrom("198.51.100.2")
	others := make([][]byte, 100_000)
	for i := range others {
		others[i] = dnsFrom(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xFF, i&0xFF))
	}
	var legitSent, legitPassed, heavyPassed, othersSent, othersPassed int
	const step = 10 * time.Millisecond
	steps := int(2 * time.Second / step)
	for s := 0; s < steps; s++ {
		c.advance(step)
		if s%2 == 0 { // half the rate: one frame every other 10 ms
			p, _ := c.send(legit, 1)
			legitSent++
			legitPassed += p
		}
		p, _ := c.send(heavy, 20) // 20 times the rate
		heavyPassed += p
		// Every other source sends one frame a second (1 % of its rate), spread over the steps.
		for i := s % 100; i < len(others); i += 100 {
			p, _ := c.send(others[i], 1)
			othersSent++
			othersPassed += p
		}
	}
	t.Logf("legit %d/%d, heavy passed %d of %d, others %d/%d", legitPassed, legitSent, heavyPassed, 20*steps, othersPassed, othersSent)
	require.GreaterOrEqual(t, float64(legitPassed), 0.999*float64(legitSent), "legitimate source")
	require.Equal(t, othersSent, othersPassed, "sources under their rate")
	want := rate*2 + rate
	require.InDelta(t, want, heavyPassed, 0.1*float64(want), "heavy source: rate x t + burst")
}

// TestLimitSampled: with sampling on, the limit program samples a limit
// rule's frames under the verdict they got: the frames over budget as
// dropped by that rule, the ones within it not at all (only drops are
// sampled here).
func TestLimitSampled(t *testing.T) {
	c := loadLimited(t, bpf.Policy{
		Rules:  []bpf.Rule{limitRule(bpf.Limit{Rate: 1, Burst: 2, PrefixV4: 32, PrefixV6: 64})},
		Sample: bpf.Sampling{Rate: 1, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true}, MaxPerSecond: 1_000_000, Snaplen: 64},
	})
	passed, dropped := c.send(dnsFrom("198.51.100.1"), 5)
	require.Equal(t, [2]int{2, 3}, [2]int{passed, dropped})
	got := readSamples(t, c.p, 3)
	for _, s := range got {
		require.Equal(t, bpf.ActionDrop, s.Action)
		require.True(t, s.Dropped)
		require.Equal(t, 0, s.Rule)
	}
}

// TestLimitBurstShorterThanATick: a rule whose burst lasts less than a
// kernel tick (rate 50,000, burst 10: 0.2 ms) decides on the precise clock,
// not the tick's coarse time, which would admit burst frames a tick and
// then drop the rest of the tick. Each frame offered through prog.Run is
// bracketed by the monotonic clock the program reads (before and after the
// run), and the verdicts are checked against GCRA's own bounds on those
// times, whatever rate the machine offers them at: no more passed than
// burst + rate x t since the first frame, and no frame dropped later than
// one interval (20 us) after the last frame passed, as its tolerance only
// lets the budget run out within one interval of a frame within it.
func TestLimitBurstShorterThanATick(t *testing.T) {
	testns.RequirePrivileged(t)
	lim := bpf.Limit{Rate: 50_000, Burst: 10, PrefixV4: 32, PrefixV6: 64}
	interval := time.Second / time.Duration(lim.Rate)
	p, err := bpf.Load(bpf.Policy{Rules: []bpf.Rule{limitRule(lim)}})
	require.NoError(t, err)
	defer p.Close()
	opts := &ebpf.RunOptions{Data: dnsFrom("198.51.100.1")}
	base := time.Now()
	var sent, passed, dropped int
	var lastPass time.Duration // when the run of the last frame passed ended
	var tooMany, tooLate []string
	// Enough drops and passes past the burst that the budget ran out and
	// refilled many times; a minute without them is a hang.
	for dropped < 1000 || passed < 1000 {
		require.Less(t, time.Since(base), testns.Hang, "%d frames passed and %d dropped of %d offered", passed, dropped, sent)
		before := time.Since(base)
		v, err := p.XDP().Run(opts)
		after := time.Since(base)
		require.NoError(t, err)
		sent++
		switch v {
		case xdpPass:
			passed++
			// GCRA admits at most burst frames, then one an interval.
			if most := int(lim.Burst) + int(after/interval); passed > most && len(tooMany) < 5 {
				tooMany = append(tooMany, fmt.Sprintf("frame %d: %d passed by %v, at most %d", sent, passed, after, most))
			}
			lastPass = after
		case xdpDrop:
			dropped++
			if late := before - lastPass; late >= interval && len(tooLate) < 5 {
				tooLate = append(tooLate, fmt.Sprintf("frame %d: dropped %v after the last frame passed", sent, late))
			}
		default:
			t.Fatalf("verdict %d", v)
		}
	}
	t.Logf("%d frames offered in %v: %d passed, %d dropped", sent, time.Since(base).Round(time.Millisecond), passed, dropped)
	require.Empty(t, tooMany, "more passed than burst + rate x t")
	require.Empty(t, tooLate, "dropped more than an interval (%v) after a frame passed: the budget ran out on a clock that stood still", interval)
}
