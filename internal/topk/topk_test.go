package topk

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExactBelowCapacity: with fewer keys than entries, counts, bytes and
// the most common protocol and rule are exact.
func TestExactBelowCapacity(t *testing.T) {
	tb := New(8)
	a, b := netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/64")
	for i := 0; i < 5; i++ {
		tb.Add(a, 100, 17, -1)
	}
	tb.Add(a, 100, 6, 2)
	for i := 0; i < 3; i++ {
		tb.Add(b, 10, 6, 1)
	}
	top := tb.Top(10)
	require.Equal(t, []Entry{
		{Key: a, Count: 6, Bytes: 600, Protocol: 17, Rule: -1},
		{Key: b, Count: 3, Bytes: 30, Protocol: 6, Rule: 1},
	}, top)
	require.Equal(t, uint64(9), tb.Total())
	tb.Reset()
	require.Empty(t, tb.Top(10))
	require.Zero(t, tb.Total())
}

// TestMostCommonWithoutMajority: a source whose frames are 40 TCP, then
// 62 UDP, then 30 ICMP (no protocol has half of them) reports UDP, and the
// rule that decided most of them, whatever order they came in.
func TestMostCommonWithoutMajority(t *testing.T) {
	a := netip.MustParsePrefix("192.0.2.0/24")
	tb := New(4)
	for _, run := range []struct {
		n     int
		proto uint8
		rule  int
	}{{40, 6, 1}, {62, 17, -1}, {30, 1, -1}, {3, 47, 2}, {2, 50, 3}} {
		for range run.n {
			tb.Add(a, 60, run.proto, run.rule)
		}
	}
	top := tb.Top(1)
	require.Len(t, top, 1)
	require.Equal(t, uint8(17), top[0].Protocol, "UDP, the most common (46%%), not the last run's")
	require.Equal(t, -1, top[0].Rule, "the policy decided 92 of 137")
}

// TestHeavyKeysAmongSpoofed: a million distinct keys do not grow the table
// past its capacity, and the heavy keys come out in order with counts
// within total/capacity above their true counts.
func TestHeavyKeysAmongSpoofed(t *testing.T) {
	const capacity, n = 256, 1_000_000
	tb := New(capacity)
	rng := rand.New(rand.NewPCG(1, 2))
	heavy := []netip.Prefix{
		netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("192.0.2.0/24"),
	}
	weights := []float64{0.05, 0.03, 0.01}
	want := make([]uint64, len(heavy))
	for i := 0; i < n; i++ {
		r := rng.Float64()
		k := -1
		for j, w := range weights {
			if r < w {
				k = j
				break
			}
			r -= w
		}
		if k >= 0 {
			want[k]++
			tb.Add(heavy[k], 64, 17, -1)
			continue
		}
		var a [4]byte
		u := rng.Uint32()
		a[0], a[1], a[2], a[3] = byte(u>>24), byte(u>>16), byte(u>>8), byte(u)
		tb.Add(Aggregate(netip.AddrFrom4(a), 32, 64), 64, 6, -1)
	}
	require.LessOrEqual(t, len(tb.pos), capacity)
	require.Len(t, tb.heap, capacity)
	top := tb.Top(3)
	for i, e := range top {
		require.Equal(t, heavy[i], e.Key)
		require.GreaterOrEqual(t, e.Count, want[i])
		require.LessOrEqual(t, e.Count-want[i], uint64(n/capacity))
		require.Equal(t, uint8(17), e.Protocol)
	}
}

func TestAggregate(t *testing.T) {
	for _, c := range []struct {
		addr         string
		bits4, bits6 int
		want         string
	}{
		{"203.0.113.77", 24, 64, "203.0.113.0/24"},
		{"203.0.113.77", 32, 64, "203.0.113.77/32"},
		// IPv6 frames from an IPv4-mapped address are IPv6 sources, not the IPv4 network's.
		{"::ffff:203.0.113.77", 16, 64, "::/64"},
		{"::ffff:203.0.113.77", 16, 120, "::ffff:203.0.113.0/120"},
		{"2001:db8:1:2:3:4:5:6", 24, 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 24, 48, "2001:db8:1::/48"},
	} {
		require.Equal(t, c.want, Aggregate(netip.MustParseAddr(c.addr), c.bits4, c.bits6).String(), c.addr)
	}
}
