package bpf

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPrefixBuckets: short prefixes paint their buckets, longest last; a
// bucket with few lengths lists them longest first with exact entries; one
// with more uses the trie; every entry carries its containing prefixes'
// rules and the miss mask.
func TestPrefixBuckets(t *testing.T) {
	var s prefixSet
	for i, p := range []string{"10.0.0.0/8", "10.0.0.0/12", "10.1.2.0/24", "10.1.2.4/30",
		"10.2.0.0/17", "10.2.0.0/18", "10.2.0.0/19", "10.2.0.0/20", "10.2.0.0/21", "10.2.0.0/22", "10.2.0.0/23"} {
		s.add([]netip.Prefix{netip.MustParsePrefix(p)}, 1<<i)
	}
	const miss = 1 << 40
	tb := buildPrefixTables(s.closure(miss), miss)
	bucket := func(a string) xdpDropPrefixBucket { return tb.buckets[bucketOf(netip.MustParseAddr(a))] }

	require.Equal(t, uint64(miss|1|2), bucket("10.0.0.0").Mask, "/12 inside /8")
	require.Equal(t, uint64(miss|1|2), bucket("10.15.0.0").Mask)
	require.Equal(t, uint64(miss|1), bucket("10.16.0.0").Mask, "/8 only")
	require.Equal(t, uint64(miss), bucket("11.0.0.0").Mask)
	require.Equal(t, uint64(miss), bucket("2001:db8::").Mask)

	b := bucket("10.1.0.0")
	require.Equal(t, uint8(2), b.N)
	require.Equal(t, [6]uint8{30, 24}, b.Lens)
	require.Equal(t, uint8(0), b.Trie)
	require.Equal(t, uint64(miss|1|2|4|8), tb.exact[prefixKey(netip.MustParsePrefix("10.1.2.4/30"))])

	b = bucket("10.2.0.0")
	require.Equal(t, uint8(1), b.Trie, "seven lengths: the trie")
	require.Len(t, tb.trie4, 7)
	require.Equal(t, uint64(miss|1|2|0b11111110000), tb.trie4[netip.MustParsePrefix("10.2.0.0/23")])
	require.Len(t, tb.exact, 2)
}
