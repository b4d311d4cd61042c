//go:build linux

package bpf_test

import (
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

func udpFrom(src string, payload int) []byte {
	s := netip.MustParseAddr(src)
	d := netip.MustParseAddr("198.51.100.1")
	if s.Is4() {
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(payload)), s, d))
	}
	d = netip.MustParseAddr("2001:db8::1")
	return frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(payload)), s, d))
}

func loadSampling(t *testing.T, policy bpf.Policy) *bpf.Program {
	t.Helper()
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// readSamples reads n samples, copying them, within a few seconds.
func readSamples(t *testing.T, p *bpf.Program, n int) []bpf.Sample {
	t.Helper()
	r, err := p.SampleReader()
	require.NoError(t, err)
	done := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { r.Close() })
	defer func() { timer.Stop(); r.Close(); close(done) }()
	var got []bpf.Sample
	for len(got) < n {
		s, err := r.Read()
		if errors.Is(err, bpf.ErrSamplerClosed) {
			t.Fatalf("read %d samples of %d", len(got), n)
		}
		require.NoError(t, err)
		c := *s
		c.Data = append([]byte(nil), s.Data...)
		got = append(got, c)
	}
	return got
}

// TestSampleEveryFrame: with a rate of 1 every frame of the sampled action
// goes up with its header and its first snaplen bytes, and no other does;
// without sampling the program has no sample maps at all.
func TestSampleEveryFrame(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := bpf.Policy{
		Protocols: []uint8{frames.ProtoUDP},
		Sample:    bpf.Sampling{Rate: 1, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true}, MaxPerSecond: 1_000_000, Snaplen: 64},
	}
	p := loadSampling(t, policy)
	udp := udpFrom("203.0.113.7", 200)
	tcp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(10)))
	short := udpFrom("203.0.113.8", 0)
	_, err := p.XDP().Run(&ebpf.RunOptions{Data: udp, Repeat: 30})
	require.NoError(t, err)
	_, err = p.XDP().Run(&ebpf.RunOptions{Data: tcp, Repeat: 20})
	require.NoError(t, err)
	_, err = p.XDP().Run(&ebpf.RunOptions{Data: short})
	require.NoError(t, err)

	got := readSamples(t, p, 31)
	for i, s := range got[:30] {
		require.Equal(t, udp[:64], s.Data, "sample %d", i)
		require.Equal(t, len(udp), s.Len)
		require.Equal(t, bpf.IPv4Class(frames.ProtoUDP), s.Class)
		require.Equal(t, bpf.ActionDrop, s.Action)
		require.True(t, s.Dropped)
		require.Equal(t, -1, s.Rule)
	}
	require.Equal(t, short, got[30].Data, "a frame shorter than snaplen goes up whole")
	counts, err := p.SampleCounts()
	require.NoError(t, err)
	require.Equal(t, bpf.SampleCounts{Sent: 31}, counts)

	plain := loadSampling(t, bpf.Policy{Protocols: []uint8{frames.ProtoUDP}})
	_, err = plain.SampleReader()
	require.Error(t, err)
	require.Equal(t, bpf.FDsPerInterface+6, policy.FDs())
}

// TestSampleRuleAndDryRun: a frame a rule decided carries the rule; in a
// dry run a would-be drop is sampled as a drop that was not dropped.
func TestSampleRuleAndDryRun(t *testing.T) {
	testns.RequirePrivileged(t)
	rules := []bpf.Rule{
		{Name: "other", Drop: true, Protocols: []uint8{frames.ProtoGRE}},
		{Name: "net", Drop: true, SrcPrefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
	}
	p := loadSampling(t, bpf.Policy{Rules: rules, DryRun: true,
		Sample: bpf.Sampling{Rate: 1, Actions: [bpf.ActionCount]bool{true, true}, MaxPerSecond: 1000, Snaplen: 128}})
	v, err := p.XDP().Run(&ebpf.RunOptions{Data: udpFrom("203.0.113.9", 10)})
	require.NoError(t, err)
	require.Equal(t, uint32(xdpPass), v)
	_, err = p.XDP().Run(&ebpf.RunOptions{Data: udpFrom("192.0.2.1", 10)})
	require.NoError(t, err)
	got := readSamples(t, p, 2)
	require.Equal(t, 1, got[0].Rule)
	require.Equal(t, bpf.ActionDrop, got[0].Action)
	require.False(t, got[0].Dropped)
	require.Equal(t, -1, got[1].Rule)
	require.Equal(t, bpf.ActionPass, got[1].Action)
}

// TestSampleRate: 1 in N on average, within 5 standard deviations of the
// countdown's spread (each gap uniform in 1..2N-1).
func TestSampleRate(t *testing.T) {
	testns.RequirePrivileged(t)
	const rate, frames_ = 10, 200_000
	p := loadSampling(t, bpf.Policy{DropAll: true,
		Sample: bpf.Sampling{Rate: rate, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true}, MaxPerSecond: 1_000_000, Snaplen: 16}})
	_, err := p.XDP().Run(&ebpf.RunOptions{Data: udpFrom("203.0.113.1", 10), Repeat: frames_})
	require.NoError(t, err)
	c, err := p.SampleCounts()
	require.NoError(t, err)
	gapVar := float64((2*rate-1)*(2*rate-1)-1) / 12
	sd := math.Sqrt(frames_ * gapVar / (rate * rate * rate))
	require.Zero(t, c.Lost+c.Capped)
	require.InDelta(t, frames_/rate, float64(c.Sent), 5*sd+1, "sd %.1f", sd)
}

// TestSampleCap: the kernel sends at most the cap's burst plus its rate
// over the time taken; every other sampled frame is counted as capped.
func TestSampleCap(t *testing.T) {
	testns.RequirePrivileged(t)
	const perSecond, n = 200, 100_000
	s := bpf.Sampling{Rate: 1, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true}, MaxPerSecond: perSecond, Snaplen: 128}
	p := loadSampling(t, bpf.Policy{DropAll: true, Sample: s})
	start := time.Now()
	_, err := p.XDP().Run(&ebpf.RunOptions{Data: udpFrom("203.0.113.1", 10), Repeat: n})
	require.NoError(t, err)
	elapsed := time.Since(start)
	c, err := p.SampleCounts()
	require.NoError(t, err)
	require.Equal(t, uint64(n), c.Sent+c.Capped+c.Lost)
	require.Zero(t, c.Lost)
	most := uint64(s.Burst()) + uint64(math.Ceil(elapsed.Seconds()*perSecond))
	require.LessOrEqual(t, c.Sent, most, "in %v", elapsed)
	require.GreaterOrEqual(t, c.Sent, uint64(s.Burst()))
}

// TestSampleMultiBuffer: a jumbo frame split over buffers, even with its
// first buffer shorter than the snap length, goes up with its first
// snaplen bytes and its whole length; with per-queue counters too.
func TestSampleMultiBuffer(t *testing.T) {
	testns.RequirePrivileged(t)
	p := loadSampling(t, bpf.Policy{DropAll: true, PerQueue: true,
		Sample: bpf.Sampling{Rate: 1, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true}, MaxPerSecond: 1000, Snaplen: 256}})
	require.NoError(t, p.UseMultiBuffer())
	frame := udpFrom("203.0.113.7", 9014-42)
	for _, linear := range []int{0, 100} {
		v, err := runSplit(p.XDP(), frame, linear)
		require.NoError(t, err)
		require.Equal(t, uint32(xdpDrop), v)
	}
	for i, s := range readSamples(t, p, 2) {
		require.Equal(t, len(frame), s.Len, "sample %d", i)
		require.Equal(t, frame[:256], s.Data, "sample %d", i)
	}
}
