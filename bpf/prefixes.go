package bpf

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"
)

// prefixTables is one direction's prefixes as the program looks them up:
// buckets by family and first 16 bits, exact-match entries for the longer
// prefixes of buckets with few lengths, tries for the others.
type prefixTables struct {
	buckets      []xdpDropPrefixBucket // nil without prefixes
	exact        map[exactKey]uint64
	trie4, trie6 map[netip.Prefix]uint64
	// long are the prefixes of each bucket longer than it, with their
	// masks: a bucket whose exact prefixes do not fit the hash table moves
	// them to the trie.
	long   map[int][]netip.Prefix
	closed map[netip.Prefix]uint64
}

// exactKey is an exact prefix as the program looks it up: its length (|
// PREFIX_KEY_V6 | PREFIX_KEY_DST) and masked address, network order words.
type exactKey struct {
	len  uint32
	addr [4]uint32
}

const (
	bucketBits = 16
	bucketLens = int(xdpDropPrefixLimitsPREFIX_BUCKET_LENS)
	buckets    = int(xdpDropPrefixLimitsPREFIX_BUCKETS)
)

// bucketOf is the bucket of an address: its family's base plus its first
// 16 bits.
func bucketOf(a netip.Addr) int {
	b := a.AsSlice()
	idx := int(b[0])<<8 | int(b[1])
	if !a.Is4() {
		idx += buckets
	}
	return idx
}

// prefixKey is the exact-match key of a masked source prefix.
func prefixKey(p netip.Prefix) exactKey {
	k := exactKey{len: uint32(p.Bits())}
	b := p.Addr().AsSlice()
	if !p.Addr().Is4() {
		k.len |= uint32(xdpDropPrefixLimitsPREFIX_KEY_V6)
	}
	for w := 0; w*4 < len(b); w++ {
		k.addr[w] = binary.NativeEndian.Uint32(b[w*4:])
	}
	return k
}

// buildPrefixTables lays out closure masks (per prefix, as closure gives
// them) for the program; miss is the mask of an address no prefix holds.
func buildPrefixTables(closed map[netip.Prefix]uint64, miss uint64) prefixTables {
	t := prefixTables{exact: map[exactKey]uint64{}, trie4: map[netip.Prefix]uint64{}, trie6: map[netip.Prefix]uint64{},
		long: map[int][]netip.Prefix{}, closed: closed}
	if len(closed) == 0 {
		return t
	}
	t.buckets = make([]xdpDropPrefixBucket, 2*buckets)
	for i := range t.buckets {
		t.buckets[i].Mask = miss
	}
	// Short prefixes paint the buckets they cover, shorter first, so
	// that the longest containing a bucket gives its mask.
	var short []netip.Prefix
	long := t.long
	for p := range closed {
		if p.Bits() <= bucketBits {
			short = append(short, p)
		} else {
			long[bucketOf(p.Addr())] = append(long[bucketOf(p.Addr())], p)
		}
	}
	slices.SortFunc(short, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	for _, p := range short {
		first := bucketOf(p.Addr())
		for i := 0; i < 1<<(bucketBits-p.Bits()); i++ {
			t.buckets[first+i].Mask = closed[p]
		}
	}
	for idx, ps := range long {
		var lens []uint8
		for _, p := range ps {
			if l := uint8(p.Bits()); !slices.Contains(lens, l) {
				lens = append(lens, l)
			}
		}
		b := &t.buckets[idx]
		if len(lens) > bucketLens {
			t.toTrie(idx)
			continue
		}
		slices.SortFunc(lens, func(a, b uint8) int { return int(b) - int(a) })
		b.N = uint8(len(lens))
		copy(b.Lens[:], lens)
		for _, p := range ps {
			t.exact[prefixKey(p)] = closed[p]
		}
	}
	return t
}

// toTrie makes bucket idx look its longer prefixes up in the trie.
func (t *prefixTables) toTrie(idx int) {
	t.buckets[idx].Trie = 1
	for _, p := range t.long[idx] {
		delete(t.exact, prefixKey(p))
		if p.Addr().Is4() {
			t.trie4[p] = t.closed[p]
		} else {
			t.trie6[p] = t.closed[p]
		}
	}
}

// prefixHashMul is PREFIX_HASH_MUL of the program.
const prefixHashMul = 0x9E3779B97F4A7C15

const prefixProbes = int(xdpDropPrefixLimitsPREFIX_PROBES)

// hashKey is the secret key of the exact-prefix hash (prefix_hash_key), its
// first word odd. A layout is made with one key, and the program that reads
// it must be loaded with the same: the key travels with the tables.
type hashKey [xdpDropPrefixLimitsPREFIX_HASH_KEY_WORDS]uint64

// newHashKey draws the key of a layout. A variable for tests, which need
// to know where prefixes land.
var newHashKey = func() hashKey {
	var k hashKey
	var b [8 * len(k)]byte
	// crypto/rand never fails on Linux (getrandom, or a crash).
	_, _ = rand.Read(b[:])
	for i := range k {
		k[i] = binary.NativeEndian.Uint64(b[8*i:])
	}
	k[0] |= 1
	return k
}

// home is the slot where the program's search for k starts in a table of
// 1<<(64-shift) slots under key (prefix_home): the length and address words
// (host order of network-order words) hashed by multiply-shift with the
// key, folded and multiplied.
func (k exactKey) home(key *hashKey, shift uint32) int {
	w := func(i int) uint64 { return uint64(bits.ReverseBytes32(k.addr[i])) }
	var x uint64
	if k.len&uint32(xdpDropPrefixLimitsPREFIX_KEY_V6) != 0 {
		x = uint64(k.len)*key[0] + w(0)*key[1] + w(1)*key[2] + w(2)*key[3] + w(3)*key[4]
	} else {
		x = (uint64(k.len)<<32 | w(0)) * key[0]
	}
	x ^= x >> 32
	return int((x * prefixHashMul) >> shift)
}

// exactTable is the program's hash table of exact prefixes (prefix_exact):
// every prefix sits within prefixProbes slots of its home under key with no
// empty slot between, so a search ends at the prefix or at a gap.
type exactTable struct {
	slots []xdpDropPrefixSlot // nil without exact prefixes
	shift uint32
	key   hashKey
	// overflow counts the prefixes, and buckets, that did not fit the table
	// at its ceiling and went to the trie with their buckets.
	overflowPrefixes, overflowBuckets int
}

// The table starts with at least exactRoom slots per prefix (a power of
// two) and grows up to 1<<maxExactGrowth times that before buckets give up
// on it: the ceiling, whatever the prefixes. Variables for tests.
var (
	exactRoom      = 2
	maxExactGrowth = 1
	exactReach     = prefixProbes // slots past its home a prefix may be placed
)

// placeExact lays out both directions' exact prefixes under key, a secret.
// Placed in order of their home slots, each prefix goes to its home or
// the first free slot after it, which keeps the farthest any prefix sits
// from its home small (the layout Robin Hood hashing keeps). A prefix that
// would sit too far from its home makes the table twice as large; after
// maxExactGrowth doublings its bucket moves to the trie instead, which
// costs that bucket speed, not correctness. The key makes that a matter of
// luck, not of the prefixes chosen; the ceiling bounds the memory even so.
func placeExact(src, dst *prefixTables, key hashKey) exactTable {
	type entry struct {
		key  exactKey
		mask uint64
		t    *prefixTables
		home int
	}
	moved := map[*prefixTables]map[int]bool{}
	overflow := 0
	for {
		var entries []entry
		for _, t := range []*prefixTables{src, dst} {
			for k, m := range t.exact {
				if t == dst {
					k.len |= uint32(xdpDropPrefixLimitsPREFIX_KEY_DST)
				}
				entries = append(entries, entry{key: k, mask: m, t: t})
			}
		}
		if len(entries) == 0 {
			return exactTable{key: key, overflowPrefixes: overflow, overflowBuckets: countMoved(moved)}
		}
		bits := bitsFor(exactRoom * len(entries))
		var failed []entry
		for grow := 0; grow <= maxExactGrowth; grow++ {
			shift := uint32(64 - bits - grow)
			for i := range entries {
				entries[i].home = entries[i].key.home(&key, shift)
			}
			slices.SortFunc(entries, func(a, b entry) int {
				if a.home != b.home {
					return a.home - b.home
				}
				return cmpKeys(a.key, b.key)
			})
			slots := make([]xdpDropPrefixSlot, 1<<(bits+grow)+prefixProbes-1)
			reach := min(exactReach, prefixProbes)
			failed = failed[:0]
			next := 0
			for _, e := range entries {
				pos := max(e.home, next)
				if pos-e.home >= reach {
					failed = append(failed, e)
					continue
				}
				slots[pos] = xdpDropPrefixSlot{Len: e.key.len, Addr: e.key.addr, Mask: e.mask}
				next = pos + 1
			}
			if len(failed) == 0 {
				return exactTable{slots: slots, shift: shift, key: key, overflowPrefixes: overflow, overflowBuckets: countMoved(moved)}
			}
		}
		for _, e := range failed {
			idx := bucketOf(e.key.addrOf())
			if moved[e.t] == nil {
				moved[e.t] = map[int]bool{}
			}
			if !moved[e.t][idx] {
				moved[e.t][idx] = true
				overflow += len(e.t.long[idx])
			}
			e.t.toTrie(idx)
		}
	}
}

// addrOf is the address of an exact key.
func (k exactKey) addrOf() netip.Addr {
	if k.len&uint32(xdpDropPrefixLimitsPREFIX_KEY_V6) != 0 {
		var b [16]byte
		for w := range k.addr {
			binary.NativeEndian.PutUint32(b[4*w:], k.addr[w])
		}
		return netip.AddrFrom16(b)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], k.addr[0])
	return netip.AddrFrom4(b)
}

func countMoved(moved map[*prefixTables]map[int]bool) int {
	n := 0
	for _, m := range moved {
		n += len(m)
	}
	return n
}

// bitsFor is the number of bits of the smallest power of two >= n (at least 1).
func bitsFor(n int) int {
	b := 1
	for 1<<b < n {
		b++
	}
	return b
}

func cmpKeys(a, b exactKey) int {
	if a.len != b.len {
		return int(a.len) - int(b.len)
	}
	return slices.Compare(a.addr[:], b.addr[:])
}
