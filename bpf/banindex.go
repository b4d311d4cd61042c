//go:build linux

package bpf

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"
)

// banIndex is user space's copy of one family's entries and the refcounts
// behind its bucket bitmaps. It only counts: the BanTable writes what its
// counts say changed.
type banIndex struct {
	entries map[netip.Prefix]banValue
	bans    int                  // entries that are bans, not allowed prefixes
	refs    map[uint32]uint32    // bucket<<8 | length → entries, lengths at least the bucket width
	long    map[uint32][2]uint64 // bucket → bitmap of those lengths
	short   [129]uint32          // length → entries shorter than the bucket width
	allow   map[int]int          // length of allowed prefixes → how many
}

func newBanIndex() banIndex {
	return banIndex{entries: map[netip.Prefix]banValue{}, refs: map[uint32]uint32{}, long: map[uint32][2]uint64{}, allow: map[int]int{}}
}

// banValue is an entry as user space keeps it: an allowed prefix, or a ban
// and each origin's claim on it.
type banValue struct {
	claims [BanOrigins]uint64 // each origin's end, monotonic ns; 0: no claim
	pps    [BanOrigins]uint32 // each claim's rate when it is a limit; 0: a drop
	origin uint8              // the drop claim the kernel entry names for its frames
	allow  bool
}

// end is the entry's end in the kernel: the latest claim's; the largest
// for an allowed prefix.
func (v banValue) end() uint64 {
	if v.allow {
		return math.MaxUint64
	}
	return slices.Max(v.claims[:])
}

// claimed reports whether an origin holds a claim on the ban.
func (v banValue) claimed() bool { return v.end() != 0 }

// holders counts the origins holding a claim on the ban.
func (v banValue) holders() int {
	n := 0
	for _, c := range v.claims {
		if c != 0 {
			n++
		}
	}
	return n
}

// latest is the origin whose claim lasts longest among those drops says
// (drop claims, or limit claims), the first on a tie; -1 for none.
func (v banValue) latest(drops bool) int {
	best := -1
	for o, c := range v.claims {
		if c != 0 && (v.pps[o] == 0) == drops && (best < 0 || c > v.claims[best]) {
			best = o
		}
	}
	return best
}

// name picks the drop claim the entry names for its frames: the one it
// names, while that claim is in force at now (the first origin to ban
// keeps its frames); otherwise the drop claim in force that lasts longest,
// or the latest when none is. Without a drop claim, the limit claim that
// lasts longest, whose origin the kernel counts the frames under anyway.
func (v *banValue) name(now uint64) {
	if v.claims[v.origin] > now && v.pps[v.origin] == 0 {
		return
	}
	drops := v.latest(true) >= 0
	// Candidates: the drop claims, or the limit claims when there is none; the named one kept on a tie.
	cur := v.claims[v.origin] != 0 && (v.pps[v.origin] == 0) == drops
	for o, c := range v.claims {
		if c != 0 && (v.pps[o] == 0) == drops && (!cur || c > v.claims[v.origin]) {
			v.origin, cur = uint8(o), true
		}
	}
}

// kernel is the entry as the kernel's hash holds it, its rate's cell idle.
func (v banValue) kernel() xdpDropBanValue {
	kind := uint8(xdpDropBanLimitsBAN_KIND_BAN)
	if v.allow {
		kind = uint8(xdpDropBanLimitsBAN_KIND_ALLOW)
	}
	k := xdpDropBanValue{End: v.end(), Origin: v.origin, Kind: kind, Claims: v.claims, Pps: v.pps}
	if v.allow {
		return k
	}
	if o := v.latest(true); o >= 0 {
		k.DropEnd = v.claims[o]
	}
	if o := v.latest(false); o >= 0 {
		k.LimitOrigin = uint8(o)
		k.Interval, k.Tau = banRate(v.pps[o])
	}
	return k
}

// banRate is the GCRA cell's interval and tau (limit.h) of a limit of pps
// frames a second, with a burst of max(pps/10, 1) frames: a tenth of a
// second's, so that the coarse clock's tick is fine enough.
func banRate(pps uint32) (interval, tau uint64) {
	interval = 1e9 / uint64(pps)
	return interval, uint64(max(pps/10, 1)-1) * interval
}

// valueOf is the entry a kernel value holds; a ban without claims (none
// is written so) is its origin's until its end.
func valueOf(k xdpDropBanValue) banValue {
	v := banValue{claims: k.Claims, pps: k.Pps, origin: k.Origin % BanOrigins, allow: k.Kind == uint8(xdpDropBanLimitsBAN_KIND_ALLOW)}
	if v.allow {
		v.claims, v.pps = [BanOrigins]uint64{}, [BanOrigins]uint32{}
	} else if !v.claimed() {
		v.claims[v.origin], v.pps = k.End, [BanOrigins]uint32{}
	}
	return v
}

const (
	banBuckets = int(xdpDropBanLimitsBAN_BUCKETS)
	// banWidth is the bucket width per family: shorter prefixes are in
	// every bucket of it.
	banWidth4, banWidth6 = 16, 48
)

// monoOf is t on the monotonic clock, given the two clocks read together.
func monoOf(t, wallNow time.Time, monoNow uint64) uint64 {
	d := t.Sub(wallNow) // saturates at about 292 years
	if d >= 0 {
		return monoNow + uint64(d)
	}
	if uint64(-d) > monoNow {
		return 0
	}
	return monoNow - uint64(-d)
}

// family is 0 for IPv4, 1 for IPv6.
func family(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

// normalize is p masked, an IPv4-mapped IPv6 prefix as IPv4, or why it
// cannot be an entry.
func normalize(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return p, fmt.Errorf("prefix %s is not valid", p)
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	if p.Bits() == 0 {
		return p, fmt.Errorf("prefix %s covers a whole family: give a longer one", p)
	}
	return p.Masked(), nil
}

// banBucketOf is the bucket of p's address in its family, as ban_find folds it.
func banBucketOf(p netip.Prefix) uint32 {
	if p.Addr().Is4() {
		a := p.Addr().As4()
		return uint32(a[0])<<8 | uint32(a[1])
	}
	a := p.Addr().As16()
	h := binary.BigEndian.Uint32(a[:4])
	return (h ^ h>>16 ^ uint32(binary.BigEndian.Uint16(a[4:6]))) & 0xFFFF
}

func widthOf(fam int) int {
	if fam == 0 {
		return banWidth4
	}
	return banWidth6
}

// bit sets the bit of length n in b.
func bit(b *[2]uint64, n int) { b[(n-1)/64] |= 1 << ((n - 1) % 64) }

// shortBits is the bitmap of a family's lengths shorter than its buckets.
func (x *banIndex) shortBits() [2]uint64 {
	var b [2]uint64
	for n, c := range x.short {
		if c > 0 {
			bit(&b, n)
		}
	}
	return b
}

// bucket is bucket b as the program must read it: its long lengths and
// the family's short ones.
func (x *banIndex) bucket(b uint32) xdpDropBanBucket {
	v, s := x.long[b], x.shortBits()
	return xdpDropBanBucket{Bits: [2]uint64{v[0] | s[0], v[1] | s[1]}}
}

// bucketChange is which buckets a count changed: none, one, or all of the
// family's (a short length came or went).
type bucketChange uint8

const (
	bucketsSame bucketChange = iota
	bucketOne
	bucketsAll
)

// count adds d (1 or -1) to the refcount of p's length in its bucket (or
// every bucket), and says which buckets' bits changed (one: bucket b).
func (x *banIndex) count(p netip.Prefix, d int) (b uint32, change bucketChange) {
	n := p.Bits()
	if n < widthOf(family(p)) {
		was := x.short[n]
		x.short[n] = uint32(int(was) + d)
		if (was == 0) != (x.short[n] == 0) {
			return 0, bucketsAll
		}
		return 0, bucketsSame
	}
	b = banBucketOf(p)
	k := b<<8 | uint32(n)
	was := x.refs[k]
	now := uint32(int(was) + d)
	if now == 0 {
		delete(x.refs, k)
	} else {
		x.refs[k] = now
	}
	if (was == 0) == (now == 0) {
		return b, bucketsSame
	}
	bits := x.long[b]
	if now == 0 {
		bits[(n-1)/64] &^= 1 << ((n - 1) % 64)
	} else {
		bit(&bits, n)
	}
	if bits == [2]uint64{} {
		delete(x.long, b)
	} else {
		x.long[b] = bits
	}
	return b, bucketOne
}

// adjust counts v as a ban or an allowed prefix of p's length.
func (x *banIndex) adjust(v banValue, d int, p netip.Prefix) {
	if v.allow {
		x.allow[p.Bits()] += d
		if x.allow[p.Bits()] == 0 {
			delete(x.allow, p.Bits())
		}
		return
	}
	x.bans += d
}

// allowedBy reports whether an allowed prefix of x holds p (or is p).
func (x *banIndex) allowedBy(p netip.Prefix) bool {
	for n := range x.allow {
		if n > p.Bits() {
			continue
		}
		if v, ok := x.entries[netip.PrefixFrom(p.Addr(), n).Masked()]; ok && v.allow {
			return true
		}
	}
	return false
}

// banFilter is user space's copy of ban_bloom: the entries behind each
// bit, and the words with a bit set.
type banFilter struct {
	refs  map[uint32]uint32
	words map[uint32]uint64
}

func newBanFilter() banFilter {
	return banFilter{refs: map[uint32]uint32{}, words: map[uint32]uint64{}}
}

// count adds d (1 or -1) to the entries of p's bit, and says whether its
// word changed, and to what.
func (f *banFilter) count(p netip.Prefix, d int) (word uint32, w uint64, changed bool) {
	b := bloomBit(p)
	was := f.refs[b]
	now := uint32(int(was) + d)
	if now == 0 {
		delete(f.refs, b)
	} else {
		f.refs[b] = now
	}
	word = b >> 6
	if (was == 0) == (now == 0) {
		return word, f.words[word], false
	}
	w = f.words[word]
	if now == 0 {
		w &^= 1 << (b & 63)
	} else {
		w |= 1 << (b & 63)
	}
	if w == 0 {
		delete(f.words, word)
	} else {
		f.words[word] = w
	}
	return word, w, true
}

// banFilterWords is how many 64-bit words ban_bloom has.
const banFilterWords = uint32(1) << (xdpDropBanLimitsBAN_BLOOM_BITS - 6)

// Multipliers of ban_bloom's hash, as BAN_HASH_K* of the program.
const (
	banHashK0 = 0x9E3779B97F4A7C15
	banHashK1 = 0xC2B2AE3D27D4EB4F
	banHashK2 = 0x165667B19E3779F9
	banHashK3 = 0xD6E8FEB86659FD93
	banHashK4 = 0xFF51AFD7ED558CCD
)

// bloomBit is the bit of p in ban_bloom, as ban_maybe hashes it.
func bloomBit(p netip.Prefix) uint32 {
	var x uint64
	switch k := kernelKey(p).(type) {
	case *xdpDropBanV4Key:
		x = (uint64(k.Len)<<32 | uint64(k.Addr)) * banHashK0
	case *xdpDropBanV6Key:
		x = uint64(k.Len|uint32(xdpDropBanLimitsBAN_KEY_V6))*banHashK0 + uint64(k.Addr[0])*banHashK1 +
			uint64(k.Addr[1])*banHashK2 + uint64(k.Addr[2])*banHashK3 + uint64(k.Addr[3])*banHashK4
		x ^= x >> 32
		x *= banHashK0
	}
	return uint32(x >> (64 - xdpDropBanLimitsBAN_BLOOM_BITS))
}

// kernelKey is p's key in its family's hash.
func kernelKey(p netip.Prefix) any {
	if p.Addr().Is4() {
		a := p.Addr().As4()
		return &xdpDropBanV4Key{Len: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(a[:])}
	}
	a := p.Addr().As16()
	k := &xdpDropBanV6Key{Len: uint32(p.Bits())}
	for i := range k.Addr {
		k.Addr[i] = binary.NativeEndian.Uint32(a[4*i:])
	}
	return k
}
