package bpf

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// exactFind looks k up in tbl as the program's prefix_find does.
func exactFind(tbl exactTable, k exactKey) (uint64, bool) {
	idx := k.home(&tbl.key, tbl.shift)
	for i := 0; i < prefixProbes; i, idx = i+1, idx+1 {
		if idx >= len(tbl.slots) || tbl.slots[idx].Len == 0 {
			return 0, false
		}
		s := tbl.slots[idx]
		if s.Len == k.len && s.Addr == k.addr {
			return s.Mask, true
		}
	}
	return 0, false
}

// randomLongPrefixes draws n prefixes longer than a bucket of each family.
func randomLongPrefixes(rng *rand.Rand, n int) []netip.Prefix {
	ps := make([]netip.Prefix, 0, 2*n)
	for range n {
		var b4 [4]byte
		var b16 [16]byte
		for i := range b4 {
			b4[i] = byte(rng.IntN(256))
		}
		for i := range b16 {
			b16[i] = byte(rng.IntN(256))
		}
		p4, _ := netip.AddrFrom4(b4).Prefix(17 + rng.IntN(16))
		p6, _ := netip.AddrFrom16(b16).Prefix(17 + rng.IntN(112))
		ps = append(ps, p4, p6)
	}
	return ps
}

// TestExactTableLayout: every exact prefix of either direction sits within
// prefixProbes slots of its home with no empty slot between, so a search
// from its home finds it; addresses that are not prefixes are not found;
// the table is a power of two (plus the probe tail) of at least twice the
// prefixes.
func TestExactTableLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rules := []Rule{{Name: "a", SrcPrefixes: randomLongPrefixes(rng, 3000)}, {Name: "b", DstPrefixes: randomLongPrefixes(rng, 2000)}}
	tb, err := compileRules(rules)
	require.NoError(t, err)
	n := len(tb.src.exact) + len(tb.dst.exact)
	require.Greater(t, n, 9000, "nearly every prefix is exact: few buckets hold more than six lengths")
	size := len(tb.exact.slots) - (prefixProbes - 1)
	require.Equal(t, size, 1<<(64-tb.exact.shift))
	require.GreaterOrEqual(t, size, 2*n)

	used := 0
	for i, s := range tb.exact.slots {
		if s.Len == 0 {
			continue
		}
		used++
		home := exactKey{len: s.Len, addr: s.Addr}.home(&tb.exact.key, tb.exact.shift)
		require.LessOrEqual(t, home, i)
		require.Less(t, i-home, prefixProbes, "slot %d: %d past its home", i, i-home)
		for j := home; j < i; j++ {
			require.NotZero(t, tb.exact.slots[j].Len, "gap at %d before the prefix in slot %d", j, i)
		}
	}
	require.Equal(t, n, used)
	for dir, d := range []*prefixTables{&tb.src, &tb.dst} {
		for k, mask := range d.exact {
			if dir == 1 {
				k.len |= uint32(xdpDropPrefixLimitsPREFIX_KEY_DST)
			}
			got, ok := exactFind(tb.exact, k)
			require.True(t, ok, "%+v", k)
			require.Equal(t, mask, got)
		}
	}
	// The same addresses in the other direction, or one bit off, are absent.
	for k := range tb.src.exact {
		k.len |= uint32(xdpDropPrefixLimitsPREFIX_KEY_DST)
		if _, in := tb.dst.exact[exactKey{len: k.len &^ uint32(xdpDropPrefixLimitsPREFIX_KEY_DST), addr: k.addr}]; in {
			continue
		}
		_, ok := exactFind(tb.exact, k)
		require.False(t, ok)
		k.len &^= uint32(xdpDropPrefixLimitsPREFIX_KEY_DST)
		k.addr[0] ^= 1
		_, in := tb.src.exact[k]
		_, ok = exactFind(tb.exact, k)
		require.Equal(t, in, ok, "%+v", k)
	}
}

// collidingPrefixes finds n /24s whose exact keys share one home under key
// in a table of 1<<bits slots.
func collidingPrefixes(key hashKey, n, bits int) []netip.Prefix {
	rng := rand.New(rand.NewPCG(1, 1))
	shift := uint32(64 - bits)
	var out []netip.Prefix
	for len(out) < n {
		p, _ := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), 0}).Prefix(24)
		if prefixKey(p).home(&key, shift) == 3 {
			out = append(out, p)
		}
	}
	return out
}

// TestExactTableGivesUpToTheTrie: prefixes that cannot be placed near
// their home even in the largest table move their buckets to the trie, and
// the table counts them; the others stay exact, and every prefix is in one
// of the two.
func TestExactTableGivesUpToTheTrie(t *testing.T) {
	const reach = 8
	defer SetExactRoom(2, 0, reach)()
	defer FixHashKey(1)()
	// 12 prefixes: a table of 32 slots, where all 12 share slot 3.
	ps := collidingPrefixes(seededKey(1), 12, bitsFor(2*12))
	tb, err := compileRules([]Rule{{Name: "a", SrcPrefixes: ps}})
	require.NoError(t, err)
	require.Len(t, tb.src.exact, reach, "as many as fit near their home stay exact")
	require.Len(t, tb.src.trie4, 12-reach)
	require.Equal(t, 12-reach, tb.exact.overflowPrefixes)
	buckets := map[int]bool{}
	for _, p := range ps {
		b := tb.src.buckets[bucketOf(p.Addr())]
		k := prefixKey(p)
		if _, ok := tb.src.exact[k]; ok {
			require.Zero(t, b.Trie)
			_, found := exactFind(tb.exact, k)
			require.True(t, found, "%s", p)
			continue
		}
		buckets[bucketOf(p.Addr())] = true
		require.Equal(t, uint8(1), b.Trie, "%s", p)
		require.Contains(t, tb.src.trie4, p)
	}
	require.Equal(t, len(buckets), tb.exact.overflowBuckets)

	// With growth allowed, a larger table separates them.
	maxExactGrowth = 4
	tb, err = compileRules([]Rule{{Name: "a", SrcPrefixes: ps}})
	require.NoError(t, err)
	require.Len(t, tb.src.exact, 12)
	require.Empty(t, tb.src.trie4)
	require.Zero(t, tb.exact.overflowPrefixes)
	require.Greater(t, len(tb.exact.slots), 32)
}

// TestRuleDecisionIndexes: the de Bruijn index of every bit is distinct, so
// rule_decisions has a slot for each rule.
func TestRuleDecisionIndexes(t *testing.T) {
	seen := map[uint64]int{}
	for i := range MaxRules {
		idx := (uint64(1) << i * ruleDebruijn) >> 58
		j, dup := seen[idx]
		require.False(t, dup, "bits %d and %d share index %d", i, j, idx)
		seen[idx] = i
	}
}

// TestExactTableConsecutiveAddresses: consecutive addresses, as lists of
// hosts or networks expanded from a range have them, spread over the table
// it starts with, as random ones do: the table does not grow for them (a
// hash of the words in network order grew it 8-fold for 100,000 /32s).
func TestExactTableConsecutiveAddresses(t *testing.T) {
	const n = 100000
	for _, c := range []struct {
		name string
		nth  func(i int) netip.Prefix
	}{
		{"IPv4 /32", func(i int) netip.Prefix {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		}},
		{"IPv4 /24", func(i int) netip.Prefix {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(10 + i>>16), byte(i >> 8), byte(i), 0}), 24)
		}},
		{"IPv6 /128", func(i int) netip.Prefix {
			return netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}), 128)
		}},
		{"IPv6 /64", func(i int) netip.Prefix {
			return netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 5: byte(i >> 16), 6: byte(i >> 8), 7: byte(i)}), 64)
		}},
	} {
		ps := make([]netip.Prefix, n)
		for i := range ps {
			ps[i] = c.nth(i)
		}
		tb, err := compileRules([]Rule{{Name: "a", SrcPrefixes: ps}})
		require.NoError(t, err)
		require.Equal(t, n, len(tb.src.exact), c.name)
		require.Equal(t, 1<<bitsFor(exactRoom*n)+prefixProbes-1, len(tb.exact.slots), "%s: the table grew", c.name)
	}
}

// TestExactTableLinearCollisions: 64 IPv6 /128s whose words, multiplied
// and added in a chain by a fixed multiplier (the hash before it had a key),
// give one 64-bit value, so that no step after the chain could tell them
// apart: under the keyed hash they spread as any prefixes do, and stay exact
// (all 64 went to the trie before).
func TestExactTableLinearCollisions(t *testing.T) {
	const mul = 0x9E3779B97F4A7C15
	inv := uint64(mul) // the inverse of mul modulo 2^64, by Newton's method
	for range 5 {
		inv *= 2 - mul*inv
	}
	rng := rand.New(rand.NewPCG(3, 3))
	u0 := rng.Uint64()
	var ps []netip.Prefix
	for i := range uint64(64) {
		// Words 1 and 2 (u) and word 3 (i): u*mul + i is the same for all.
		u := u0 - i*inv
		var b [16]byte
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
		binary.BigEndian.PutUint64(b[4:], u)
		binary.BigEndian.PutUint32(b[12:], uint32(i))
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom16(b), 128))
	}
	chain := func(p netip.Prefix) uint64 {
		b := p.Addr().As16()
		x := uint64(128|uint32(xdpDropPrefixLimitsPREFIX_KEY_V6))<<32 | uint64(binary.BigEndian.Uint32(b[:4]))
		x = x*mul + binary.BigEndian.Uint64(b[4:12])
		return x*mul + uint64(binary.BigEndian.Uint32(b[12:]))
	}
	for _, p := range ps[1:] {
		require.Equal(t, chain(ps[0]), chain(p), "%s", p)
	}
	tb, err := compileRules([]Rule{{Name: "a", SrcPrefixes: append(ps, randomLongPrefixes(rng, 1000)...)}})
	require.NoError(t, err)
	trie := 0
	for _, p := range ps {
		if _, ok := tb.src.trie6[p]; ok {
			trie++
		}
	}
	require.Zero(t, trie, "of the 64 prefixes, %d went to the trie", trie)
	require.Equal(t, 1<<bitsFor(exactRoom*len(tb.src.exact))+prefixProbes-1, len(tb.exact.slots), "the table grew")
}
