package detect

import (
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sender is a simulated sender of frames with an address: its flow (TCP)
// or its ports, at a rate, of a length.
type sender struct {
	src, dst     string
	sport, dport uint16
	pps          float64
	length       uint32
	proto        uint8
}

// frames sends a second of srcs, as second does, each sample a Frame.
func (s *sim) frames(srcs []sender) []Event {
	var total float64
	cum := make([]float64, len(srcs))
	parsed := make([]Frame, len(srcs))
	for i, src := range srcs {
		total += src.pps
		cum[i] = total
		s.packets += uint64(src.pps)
		s.bytes += uint64(src.pps) * uint64(src.length)
		parsed[i] = Frame{Src: netip.MustParseAddr(src.src), SPort: src.sport, DPort: src.dport, Length: src.length, Proto: src.proto}
		if src.dst != "" {
			parsed[i].Dst = netip.MustParseAddr(src.dst)
		}
	}
	n := int(min(total/s.rate, s.limit))
	for range n {
		i := sort.SearchFloat64s(cum, s.rnd.Float64()*total)
		s.w.AddFrame(parsed[min(i, len(srcs)-1)])
	}
	s.now = s.now.Add(time.Second)
	return s.d.Tick(s.now, []Reading{{W: s.w, Packets: s.packets, Bytes: s.bytes}})
}

func evidenceConfig() Config {
	c := baseConfig()
	c.PPS = 10_000
	c.Bits4, c.Bits6 = 24, 64
	return c
}

func banned(events []Event) []string {
	var out []string
	for _, e := range events {
		if e.Kind == Ban {
			out = append(out, e.Source.String())
		}
	}
	sort.Strings(out)
	return out
}

// TestAddressCarriesTheRate: one address of a /24 over the rate, beside a
// bystander far under it, is banned alone: the /24 is not.
func TestAddressCarriesTheRate(t *testing.T) {
	s := newSim(t, evidenceConfig(), 10, 100_000)
	srcs := []sender{
		{src: "198.18.7.53", pps: 20_000, length: 80, proto: 17},
		{src: "198.18.7.1", pps: 500, length: 80, proto: 17},
	}
	var got []string
	for range 4 {
		got = append(got, banned(s.frames(srcs))...)
	}
	require.Equal(t, []string{"198.18.7.53/32"}, got)
}

// TestSpreadBansThePrefix: a rate spread over several addresses of a /24,
// each under it, bans the /24; with one of them over the rate too, that
// one is banned alone and the /24 for the rest.
func TestSpreadBansThePrefix(t *testing.T) {
	s := newSim(t, evidenceConfig(), 10, 100_000)
	var spread []sender
	for i := range 8 {
		spread = append(spread, sender{src: netip.AddrFrom4([4]byte{198, 18, 9, byte(10 + i)}).String(), pps: 4000, length: 80, proto: 17})
	}
	var got []string
	for range 4 {
		got = append(got, banned(s.frames(spread))...)
	}
	require.Equal(t, []string{"198.18.9.0/24"}, got, "32,000 pps over 8 addresses of 4,000")

	s = newSim(t, evidenceConfig(), 10, 100_000)
	heavy := append([]sender{{src: "198.18.9.200", pps: 30_000, length: 80, proto: 17}}, spread...)
	got = nil
	for range 4 {
		got = append(got, banned(s.frames(heavy))...)
	}
	sort.Strings(got)
	require.Equal(t, []string{"198.18.9.0/24", "198.18.9.200/32"}, got, "the address first, then its prefix for the rest")

	s = newSim(t, evidenceConfig(), 10, 100_000)
	few := []sender{{src: "198.18.9.200", pps: 30_000, length: 80, proto: 17}, spread[0], spread[1]}
	got = nil
	for range 4 {
		got = append(got, banned(s.frames(few))...)
	}
	require.Equal(t, []string{"198.18.9.200/32"}, got, "the rest, 8,000 pps, is under the rate")
}

// TestBudget: past MaxPerMinute bans in a minute no ban is made, each
// refusal is a Budget event counted from 1; unverified evidence takes at
// most the larger half of the budget, so that verified evidence always
// finds room; bans resume once the oldest leaves the minute; a restored
// ban counts against it.
func TestBudget(t *testing.T) {
	cfg := evidenceConfig()
	cfg.MaxPerMinute = 10
	cfg.Verify = func(f []Flow) []bool {
		out := make([]bool, len(f))
		for i := range f {
			out[i] = f[i].Dst.Port() == 443 // the established connections
		}
		return out
	}
	s := newSim(t, cfg, 10, 1_000_000)
	var forged, real []sender
	for i := range 15 {
		forged = append(forged, sender{src: netip.AddrFrom4([4]byte{1, 0, byte(i), 1}).String(), pps: 40_000, length: 80, proto: 17})
	}
	for i := range 6 {
		real = append(real, sender{src: netip.AddrFrom4([4]byte{203, 0, byte(113 + i), 10}).String(), dst: "192.0.2.10", sport: 40000, dport: 443, pps: 20_000, length: 1400, proto: 6})
	}
	var ev []Event
	for range 3 {
		ev = append(ev, s.frames(append(append([]sender{}, forged...), real...))...)
	}
	var unverified, verified int
	var over []int
	for _, e := range ev {
		switch {
		case e.Kind == Ban && e.Verified:
			verified++
		case e.Kind == Ban:
			unverified++
		case e.Kind == Budget:
			over = append(over, e.Offence)
		}
	}
	require.Equal(t, 5, unverified, "forged sources, heavier, get the unverified half alone")
	require.Equal(t, 5, verified, "the verified half is theirs")
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1}, over, "10 forged refused, then a real one after the verified bans (a new spell)")

	s.now = s.now.Add(BudgetWindow)
	ev = nil
	for range 3 {
		ev = append(ev, s.frames(append(append([]sender{}, forged...), real...))...)
	}
	require.Len(t, banned(ev), 6, "a minute later: 5 more forged (their half) and the last real one")

	d, err := New(cfg)
	require.NoError(t, err)
	now := time.Unix(1_700_000_000, 0)
	for i := range 10 {
		// Begun 30 s ago, 29 s ago, ...
		d.Restore(netip.MustParsePrefix(forged[i].src+"/32"), now.Add(9*time.Minute+30*time.Second+time.Duration(i)*time.Second), 10*time.Minute, 1)
	}
	require.True(t, d.spentAt(now.Add(29*time.Second), true), "ten bans restored, begun within the minute")
	require.False(t, d.spentAt(now.Add(30*time.Second), true), "the first leaves the minute 30 s on")
	require.True(t, d.spentAt(now.Add(30*time.Second), false), "restored bans count as unverified")
}

// TestVerified: a source whose frames come on established connections is
// dropped; one whose flows the host does not hold gets the unverified
// action: a limit at pps, a drop, or no ban.
func TestVerified(t *testing.T) {
	flood := []sender{{src: "203.0.113.9", dst: "192.0.2.10", sport: 40001, dport: 443, pps: 20_000, length: 1400, proto: 6}}
	for _, c := range []struct {
		established bool
		unverified  Action
		kind        Kind
		verified    bool
		limit       float64
	}{
		{true, Limit, Ban, true, 0},
		{false, Limit, Ban, false, 10_000},
		{false, Drop, Ban, false, 0},
		{false, None, Refused, false, 0},
	} {
		cfg := evidenceConfig()
		cfg.Unverified = c.unverified
		var asked []Flow
		cfg.Verify = func(f []Flow) []bool {
			asked = append(asked, f...)
			return []bool{c.established}
		}
		var limits []float64
		cfg.Enforce = func(_ netip.Prefix, _ time.Time, limit float64) string {
			limits = append(limits, limit)
			return ""
		}
		s := newSim(t, cfg, 10, 100_000)
		var ev []Event
		for range 3 {
			ev = append(ev, s.frames(flood)...)
		}
		require.Len(t, ev, 1, "%+v", c)
		require.Equal(t, c.kind, ev[0].Kind, "%+v", c)
		require.Equal(t, c.verified, ev[0].Verified, "%+v", c)
		require.Equal(t, c.limit, ev[0].Limit, "%+v", c)
		require.Equal(t, []Flow{{netip.MustParseAddrPort("203.0.113.9:40001"), netip.MustParseAddrPort("192.0.2.10:443")}}, asked, "the heaviest flow, once")
		if c.kind == Ban {
			require.Equal(t, []float64{c.limit}, limits)
		} else {
			require.Empty(t, limits)
		}
	}
}

// TestUnverifiedUDP: UDP proves nothing: no flow is asked about, and the
// limit of a bytes_per_second detection is the rate over the mean frame.
func TestUnverifiedUDP(t *testing.T) {
	cfg := evidenceConfig()
	cfg.PPS, cfg.BytesPerSecond = 0, 1_000_000
	cfg.Verify = func(f []Flow) []bool { t.Fatalf("asked about %v", f); return nil }
	s := newSim(t, cfg, 10, 100_000)
	var ev []Event
	for range 3 {
		ev = append(ev, s.frames([]sender{{src: "203.0.113.9", dst: "192.0.2.10", sport: 53, dport: 53, pps: 20_000, length: 500, proto: 17}})...)
	}
	require.Len(t, ev, 1)
	require.False(t, ev[0].Verified)
	require.InDelta(t, 2000, ev[0].Limit, 40, "1,000,000 bytes/s over 500-byte frames")
}

// TestVerifiedOnlyWhatConnectionsCarry: evidence is verified only when
// the established flows alone are over the rate: a real client's
// connection under it never verifies what is forged beside it, from its
// own address or from its /24; and a prefix is never verified, whatever
// connections of its addresses carried (its bystanders proved nothing).
func TestVerifiedOnlyWhatConnectionsCarry(t *testing.T) {
	conn := sender{src: "10.9.2.77", dst: "192.0.2.10", sport: 40001, dport: 8080, pps: 9000, length: 80, proto: 6}
	for _, c := range []struct {
		name     string
		srcs     []sender
		source   string
		verified bool
	}{
		{"forged UDP from its /24", []sender{conn, {src: "10.9.2.200", pps: 6000, length: 80, proto: 17}}, "10.9.2.0/24", false},
		{"forged UDP from its address", []sender{conn, {src: "10.9.2.77", pps: 6000, length: 80, proto: 17}}, "10.9.2.77/32", false},
		{"its connection over the rate", []sender{{src: "10.9.2.77", dst: "192.0.2.10", sport: 40001, dport: 8080, pps: 20_000, length: 80, proto: 6}}, "10.9.2.77/32", true},
		{"two connections of a /24 under it each", []sender{conn, {src: "10.9.2.78", dst: "192.0.2.10", sport: 40002, dport: 8080, pps: 9000, length: 80, proto: 6}}, "10.9.2.0/24", false},
		{"one connection carrying its /24", []sender{{src: "10.9.2.77", dst: "192.0.2.10", sport: 40001, dport: 8080, pps: 9000, length: 80, proto: 6}, {src: "10.9.2.78", dst: "192.0.2.10", sport: 40002, dport: 8080, pps: 9000, length: 80, proto: 6}, {src: "10.9.2.79", pps: 1500, length: 80, proto: 17}}, "10.9.2.0/24", false},
	} {
		cfg := evidenceConfig()
		cfg.Verify = func(f []Flow) []bool {
			out := make([]bool, len(f))
			for i := range f {
				out[i] = f[i].Src == netip.MustParseAddrPort("10.9.2.77:40001") ||
					(c.name == "two connections of a /24 under it each" && f[i].Src == netip.MustParseAddrPort("10.9.2.78:40002"))
			}
			return out
		}
		s := newSim(t, cfg, 5, 1_000_000)
		var ev []Event
		for range 3 {
			ev = append(ev, s.frames(c.srcs)...)
		}
		require.Len(t, ev, 1, c.name)
		require.Equal(t, c.source, ev[0].Source.String(), c.name)
		require.Equal(t, c.verified, ev[0].Verified, c.name)
	}
}
