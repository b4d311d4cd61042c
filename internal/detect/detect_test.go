package detect

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// source is a simulated sender: a prefix at a rate of frames of a length.
type source struct {
	p      netip.Prefix
	pps    float64
	length uint32
	proto  uint8
}

// sim feeds one interface's passed frames to a detector a second at a
// time, as the kernel samples them: 1 in rate, at most limit a second
// (the cap), each sample from a source in proportion to its frames.
type sim struct {
	d       *Detector
	w       *Window
	rate    float64
	limit   float64
	rnd     *rand.Rand
	now     time.Time
	packets uint64
	bytes   uint64
}

func newSim(t *testing.T, cfg Config, rate, limit float64) *sim {
	t.Helper()
	d, err := New(cfg)
	require.NoError(t, err)
	s := &sim{d: d, w: d.NewWindow(), rate: rate, limit: limit, rnd: rand.New(rand.NewPCG(1, 2)), now: time.Unix(1_700_000_000, 0)}
	require.Empty(t, d.Tick(s.now, []Reading{{W: s.w}}))
	return s
}

// second sends a second of srcs and ticks.
func (s *sim) second(srcs []source) []Event {
	var total float64
	cum := make([]float64, len(srcs))
	for i, src := range srcs {
		total += src.pps
		cum[i] = total
		s.packets += uint64(src.pps)
		s.bytes += uint64(src.pps) * uint64(src.length)
	}
	n := int(min(total/s.rate, s.limit))
	for range n {
		i := sort.SearchFloat64s(cum, s.rnd.Float64()*total)
		i = min(i, len(srcs)-1)
		s.w.Add(srcs[i].p, srcs[i].length, srcs[i].proto)
	}
	s.now = s.now.Add(time.Second)
	return s.d.Tick(s.now, []Reading{{W: s.w, Packets: s.packets, Bytes: s.bytes}})
}

func pfx(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
}

func baseConfig() Config {
	return Config{PPS: 50_000, For: 2 * time.Second, Duration: 10 * time.Minute, MaxDuration: 24 * time.Hour}
}

func bans(events []Event) (n int) {
	for _, e := range events {
		if e.Kind == Ban {
			n++
		}
	}
	return n
}

func TestHeavySourceBannedAfterFor(t *testing.T) {
	s := newSim(t, baseConfig(), 100, 10_000)
	heavy := source{p: pfx(1), pps: 500_000, length: 100, proto: 17}
	srcs := []source{heavy}
	for i := 2; i < 102; i++ {
		srcs = append(srcs, source{p: pfx(i), pps: 1000, length: 100, proto: 6})
	}
	require.Empty(t, s.second(srcs), "one second over is not yet `for`")
	ev := s.second(srcs)
	require.Len(t, ev, 1, "banned at the tick that makes `for`")
	e := ev[0]
	require.Equal(t, Ban, e.Kind)
	require.Equal(t, heavy.p, e.Source)
	require.Equal(t, 1, e.Offence)
	require.Equal(t, 10*time.Minute, e.Duration)
	require.Equal(t, uint8(17), e.Protocol)
	require.InEpsilon(t, 500_000, e.PPS, 0.05)
	require.InEpsilon(t, 50_000_000, e.BytesPerSecond, 0.05)
	require.Empty(t, s.second(srcs), "banned once")
	require.Equal(t, 1, s.d.Active())
}

// TestEstimatesScaledUnderTheCap: with the cap taking 1 in 1,000 of a
// 10 Mpps flood at sample_rate 100, samples × rate is 10× low; the
// estimate scales to the counters.
func TestEstimatesScaledUnderTheCap(t *testing.T) {
	cfg := baseConfig()
	cfg.PPS = 2_000_000
	s := newSim(t, cfg, 100, 10_000)
	srcs := []source{{p: pfx(1), pps: 9_000_000, length: 64}, {p: pfx(2), pps: 1_000_000, length: 64}}
	s.second(srcs)
	ev := s.second(srcs)
	require.Len(t, ev, 1)
	require.Equal(t, pfx(1), ev[0].Source)
	require.InEpsilon(t, 9_000_000, ev[0].PPS, 0.05, "samples × rate would be 900,000")
}

func TestManySourcesAtHalfRateNeverBanned(t *testing.T) {
	cfg := baseConfig()
	cfg.PPS = 1000
	s := newSim(t, cfg, 100, 10_000)
	var srcs []source
	for i := range 1000 {
		srcs = append(srcs, source{p: pfx(i), pps: 500, length: 80})
	}
	for range 30 {
		require.Zero(t, bans(s.second(srcs)))
	}
	require.Zero(t, s.d.Active())
}

func TestSpoofedFloodNeverBanned(t *testing.T) {
	cfg := baseConfig()
	cfg.PPS = 1000
	cfg.TableSize = 256
	s := newSim(t, cfg, 100, 10_000)
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 30 {
		// 1,000,000 frames a second, each from a random /24 of 65,536:
		// about 15 pps each.
		var srcs []source
		for range 5000 {
			srcs = append(srcs, source{p: pfx(rnd.IntN(65536)), pps: 200, length: 64})
		}
		require.Zero(t, bans(s.second(srcs)))
	}
	tracks, active, _, _ := s.d.Sizes()
	require.Zero(t, active)
	require.LessOrEqual(t, tracks, cfg.TableSize)
}

func TestEscalation(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxDuration = 30 * time.Minute
	s := newSim(t, cfg, 100, 10_000)
	heavy := []source{{p: pfx(1), pps: 500_000, length: 100}}
	var got []string
	for range 4 {
		var ban Event
		for i := 0; ban.Kind != Ban || ban.Source != pfx(1); i++ {
			require.Less(t, i, 5)
			for _, e := range s.second(heavy) {
				ban = e
			}
		}
		got = append(got, fmt.Sprintf("%d:%s", ban.Offence, ban.Duration))
		// The ban runs its course: no frames pass meanwhile.
		s.now = ban.End.Add(-time.Second)
		ev := s.second(nil)
		require.Len(t, ev, 1)
		require.Equal(t, Expire, ev[0].Kind)
		require.Equal(t, ban.Offence, ev[0].Offence)
	}
	require.Equal(t, []string{"1:10m0s", "2:20m0s", "3:30m0s", "4:30m0s"}, got)
	// Quiet for max_duration: the history no longer counts.
	s.now = s.now.Add(cfg.MaxDuration)
	s.second(nil)
	s.second(heavy)
	ev := s.second(heavy)
	require.Len(t, ev, 1)
	require.Equal(t, 1, ev[0].Offence)
	require.Equal(t, cfg.Duration, ev[0].Duration)
}

func TestGuardRefusesOncePerDuration(t *testing.T) {
	cfg := baseConfig()
	guarded := pfx(1)
	cfg.Guard = func(p netip.Prefix) string {
		if p.Overlaps(guarded) {
			return "the default gateway 10.0.1.1"
		}
		return ""
	}
	s := newSim(t, cfg, 100, 10_000)
	srcs := []source{{p: pfx(1), pps: 500_000, length: 100}}
	var refused []Event
	for range 60 {
		for _, e := range s.second(srcs) {
			require.Equal(t, Refused, e.Kind)
			refused = append(refused, e)
		}
	}
	require.Len(t, refused, 1, "a refusal is reported once per duration")
	require.Equal(t, "the default gateway 10.0.1.1", refused[0].Reason)
	require.Zero(t, s.d.Active())
	s.now = s.now.Add(cfg.Duration)
	s.second(nil)
	s.second(srcs)
	require.Len(t, s.second(srcs), 1, "and again after it")
}

func TestEnforceRefusal(t *testing.T) {
	cfg := baseConfig()
	var enforced []netip.Prefix
	cfg.Enforce = func(p netip.Prefix, end time.Time, _ float64) string {
		enforced = append(enforced, p)
		return "max bans in force"
	}
	s := newSim(t, cfg, 100, 10_000)
	srcs := []source{{p: pfx(1), pps: 500_000, length: 100}}
	s.second(srcs)
	ev := s.second(srcs)
	require.Len(t, ev, 1)
	require.Equal(t, Refused, ev[0].Kind)
	require.Equal(t, []netip.Prefix{pfx(1)}, enforced)
	require.Zero(t, s.d.Active())
}

// TestBounds: the maps stay within their bounds when more sources are
// over the rate than the bounds hold.
func TestBounds(t *testing.T) {
	cfg := baseConfig()
	cfg.PPS = 100
	cfg.TableSize, cfg.MaxActive, cfg.MaxHistory = 64, 50, 40
	cfg.Guard = func(p netip.Prefix) string {
		if p.Addr().As4()[2]%2 == 1 {
			return "odd"
		}
		return ""
	}
	s := newSim(t, cfg, 1, 1_000_000)
	for round := range 20 {
		var srcs []source
		for i := range 64 {
			srcs = append(srcs, source{p: pfx(round*64 + i), pps: 10_000, length: 64})
		}
		s.second(srcs)
		s.second(srcs)
		tracks, active, history, refused := s.d.Sizes()
		require.LessOrEqual(t, tracks, cfg.TableSize)
		require.LessOrEqual(t, active, cfg.MaxActive)
		require.LessOrEqual(t, history, cfg.MaxHistory)
		require.LessOrEqual(t, refused, cfg.MaxHistory)
	}
	_, active, _, _ := s.d.Sizes()
	require.Equal(t, cfg.MaxActive, active, "full: further bans refused")
}

func TestProtocolsFilter(t *testing.T) {
	cfg := baseConfig()
	cfg.Protocols = []uint8{17}
	s := newSim(t, cfg, 100, 10_000)
	srcs := []source{{p: pfx(1), pps: 500_000, length: 100, proto: 6}, {p: pfx(2), pps: 500_000, length: 100, proto: 17}}
	s.second(srcs)
	ev := s.second(srcs)
	require.Len(t, ev, 1, "the TCP source does not count")
	require.Equal(t, pfx(2), ev[0].Source)
	require.InEpsilon(t, 500_000, ev[0].PPS, 0.05, "scaled to all passed frames")
}

func TestBytesPerSecond(t *testing.T) {
	cfg := baseConfig()
	cfg.PPS, cfg.BytesPerSecond = 0, 10_000_000
	s := newSim(t, cfg, 100, 10_000)
	srcs := []source{{p: pfx(1), pps: 20_000, length: 1500}, {p: pfx(2), pps: 200_000, length: 40}}
	s.second(srcs)
	ev := s.second(srcs)
	require.Len(t, ev, 1)
	require.Equal(t, pfx(1), ev[0].Source)
	require.InEpsilon(t, 30_000_000, ev[0].BytesPerSecond, 0.05)
}

func TestRestoreKeepsHistory(t *testing.T) {
	s := newSim(t, baseConfig(), 100, 10_000)
	s.d.Restore(pfx(1), s.now.Add(time.Minute), 20*time.Minute, 2)
	srcs := []source{{p: pfx(1), pps: 500_000, length: 100}}
	require.Zero(t, bans(s.second(srcs)), "in force: not banned again")
	s.now = s.now.Add(time.Minute)
	ev := s.second(nil)
	require.Len(t, ev, 1)
	require.Equal(t, Expire, ev[0].Kind)
	s.second(srcs)
	ev = s.second(srcs)
	require.Len(t, ev, 1)
	require.Equal(t, 3, ev[0].Offence)
	require.Equal(t, 40*time.Minute, ev[0].Duration)
}

// TestRestoreHistoryEscalates: a source whose ban ended before a reload,
// its history restored, is banned at once (nothing in force) as its next
// offence, twice as long, up to MaxDuration; nothing is active meanwhile.
func TestRestoreHistoryEscalates(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxDuration = time.Hour
	s := newSim(t, cfg, 100, 10_000)
	s.d.RestoreHistory(pfx(1), s.now.Add(-time.Minute), 20*time.Minute, 2)
	s.d.RestoreHistory(pfx(2), s.now.Add(-time.Minute), 40*time.Minute, 3)
	require.Zero(t, s.d.Active())
	srcs := []source{{p: pfx(1), pps: 500_000, length: 100}, {p: pfx(2), pps: 500_000, length: 100}}
	s.second(srcs)
	ev := s.second(srcs)
	require.Len(t, ev, 2)
	for _, e := range ev {
		require.Equal(t, Ban, e.Kind)
		switch e.Source {
		case pfx(1):
			require.Equal(t, 3, e.Offence)
			require.Equal(t, 40*time.Minute, e.Duration)
		case pfx(2):
			require.Equal(t, 4, e.Offence)
			require.Equal(t, time.Hour, e.Duration, "capped by MaxDuration")
		}
	}
}

func TestConfigChecks(t *testing.T) {
	for _, c := range []Config{
		{For: time.Second, Duration: time.Minute, MaxDuration: time.Hour},
		{PPS: 1, For: time.Millisecond, Duration: time.Minute, MaxDuration: time.Hour},
		{PPS: 1, For: time.Second, Duration: time.Hour, MaxDuration: time.Minute},
		{PPS: -1, For: time.Second, Duration: time.Minute, MaxDuration: time.Hour},
	} {
		_, err := New(c)
		require.Error(t, err, "%+v", c)
	}
}

// BenchmarkAdd is the detector's cost per sampled frame, all in: the
// window's add from the sampler and its share of the tick. At 1/100 of
// 10 Mpps, 100,000 samples a second, 5 % of a core is 500 ns a sample.
// The frames have addresses, aggregated to /24 (each counted under both),
// a quarter from one heavy TCP source among addresses of 65,536 /24s.
func BenchmarkAdd(b *testing.B) {
	cfg := baseConfig()
	cfg.Bits4 = 24
	d, err := New(cfg)
	require.NoError(b, err)
	w := d.NewWindow()
	frames := BenchFrames()
	now := time.Unix(1_700_000_000, 0)
	d.Tick(now, []Reading{{W: w}})
	var packets uint64
	b.ResetTimer()
	for i := range b.N {
		w.AddFrame(frames[i&(len(frames)-1)])
		if i%100_000 == 99_999 {
			packets += 10_000_000
			now = now.Add(time.Second)
			d.Tick(now, []Reading{{W: w, Packets: packets, Bytes: packets * 64}})
		}
	}
}

// BenchmarkAddPrefix is the cost before addresses and flows were kept:
// the same mix as prefixes alone, for the ratio.
func BenchmarkAddPrefix(b *testing.B) {
	d, err := New(baseConfig())
	require.NoError(b, err)
	w := d.NewWindow()
	frames := BenchFrames()
	keys := make([]netip.Prefix, len(frames))
	for i, f := range frames {
		keys[i] = netip.PrefixFrom(f.Src, 24).Masked()
	}
	now := time.Unix(1_700_000_000, 0)
	d.Tick(now, []Reading{{W: w}})
	var packets uint64
	b.ResetTimer()
	for i := range b.N {
		w.Add(keys[i&(len(keys)-1)], 64, 17)
		if i%100_000 == 99_999 {
			packets += 10_000_000
			now = now.Add(time.Second)
			d.Tick(now, []Reading{{W: w, Packets: packets, Bytes: packets * 64}})
		}
	}
}

// TestBeginRatesTheFirstSecond: a window begun at its counters and a
// detector begun at its start rate the first second: a source over the
// rate from the start is banned at the tick that makes `for`.
func TestBeginRatesTheFirstSecond(t *testing.T) {
	d, err := New(baseConfig())
	require.NoError(t, err)
	w := d.NewWindow()
	now := time.Unix(1_700_000_000, 0)
	d.Begin(now)
	w.Begin(1000, 64000)
	var packets uint64 = 1000
	for i := 1; i <= 2; i++ {
		for range 5000 {
			w.Add(pfx(1), 64, 17)
		}
		packets += 500_000
		now = now.Add(time.Second)
		ev := d.Tick(now, []Reading{{W: w, Packets: packets, Bytes: packets * 64}})
		if i == 1 {
			require.Empty(t, ev)
		} else {
			require.Len(t, ev, 1, "banned at the second tick: for = 2s")
		}
	}
}

// TestBanNamesItsWindow: a source whose frames come through two windows
// (interfaces) is banned with the one most of them came through.
func TestBanNamesItsWindow(t *testing.T) {
	d, err := New(baseConfig())
	require.NoError(t, err)
	a, b := d.NewWindow(), d.NewWindow()
	now := time.Unix(1_700_000_000, 0)
	require.Empty(t, d.Tick(now, []Reading{{W: a}, {W: b}}))
	var ev []Event
	var pa, pb uint64
	for range 2 {
		for range 100 {
			a.Add(pfx(1), 100, 17)
		}
		for range 900 {
			b.Add(pfx(1), 100, 17)
		}
		pa, pb = pa+10_000, pb+90_000
		now = now.Add(time.Second)
		ev = d.Tick(now, []Reading{{W: a, Packets: pa, Bytes: pa * 100}, {W: b, Packets: pb, Bytes: pb * 100}})
	}
	require.Len(t, ev, 1)
	require.Equal(t, Ban, ev[0].Kind)
	require.Same(t, b, ev[0].Window)
	require.InEpsilon(t, 100_000, ev[0].PPS, 0.01, "the rates of both windows")
}
