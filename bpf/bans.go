//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BanCounts are one interface's frames bans decided, by origin and action
// (BanCounts[origin][action]), summed over CPUs (Program.BanCounters).
type BanCounts [BanOrigins][banActions]Counter

// BanTable is an instance's timed bans and allowed prefixes, in maps
// shared by every interface's program of the instance (Instance.Bans).
//
// In the kernel, per family, a hash map holds each entry keyed by its
// length and masked address, valued by its end on the monotonic clock
// (bpf_ktime_get_ns), its origin and its kind (ban or allowed prefix); an
// array of 65,536 buckets per family (IPv4: the first 16 bits; IPv6: the
// first 48 folded to 16) holds the bitmap of the lengths present in each
// bucket, those shorter than the bucket's width in every bucket. A frame's
// source is probed longest length first: an allowed prefix passes it on to
// the rules, a ban in force decides it, an expired one is skipped. The
// kernel stops a ban at its end whatever user space does; Expire removes
// it. Entries are written before their bit is set and deleted after it is
// cleared, so the program never misses an entry it should see.
//
// Memory: the hashes are preallocated for Max bans plus MaxBanAllow allowed
// prefixes per family. Worst case per entry in the kernel: 104 bytes for
// IPv4 and 120 for IPv6 (a hash element of 72 or 88 bytes, and its share of
// the hash's bucket heads, 16 bytes each and a power of two of them: up to
// 32 bytes), plus 3 MiB whatever Max (2 MiB of buckets, 1 MiB of filter);
// user space keeps about 150 bytes more per entry. For the default Max of
// 100,000 the kernel accounts 26.0 MB (Memory measures it; 46.2 MB for
// 200,000, 6.8 MB for 1).
//
// A BanTable is safe for concurrent use.
type BanTable struct {
	mu    sync.Mutex
	maps  *banMaps
	max   int
	index [2]banIndex // by family: 0 IPv4, 1 IPv6
	// bloomRefs counts the entries of each bit of ban_bloom, bloomWords
	// holds the words with a bit set.
	bloomRefs  map[uint32]uint32
	bloomWords map[uint32]uint64
	// users are the instances sharing the table (ContinueBans): the last
	// to close it closes the maps.
	users int
	// history is the ban history (banhistory.go); nil until a ban is
	// remembered or one is handed over.
	history *ebpf.Map
}

// release lets one instance's use of the table go, closing the maps with
// the last.
func (t *BanTable) release() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.users--
	if t.users > 0 {
		return nil
	}
	if t.history != nil {
		t.history.Close()
	}
	return t.maps.Close()
}

// ContinueBans makes the ban table of prev, when it has one loaded, in's
// too, so that the bans in force go on in in's programs: for the instance
// of a new generation of the same policy (SwapRules calls it). Call it
// before in's first program; it does nothing when in has a table already
// or no bans.
func (in *Instance) ContinueBans(prev *Instance) {
	if in == prev {
		return
	}
	prev.mu.Lock()
	t := prev.bans
	prev.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if t == nil || in.bans != nil || !in.policy.Bans.On || in.policy.Bans.max() != t.max {
		return
	}
	t.mu.Lock()
	t.users++
	t.mu.Unlock()
	in.bans = t
}

// banMaps are the ban maps of an instance.
type banMaps struct {
	V4      *ebpf.Map `ebpf:"ban_v4"`
	V6      *ebpf.Map `ebpf:"ban_v6"`
	Buckets *ebpf.Map `ebpf:"ban_buckets"`
	Bloom   *ebpf.Map `ebpf:"ban_bloom"`
}

func (m *banMaps) ordered() []*ebpf.Map { return []*ebpf.Map{m.V4, m.V6, m.Buckets, m.Bloom} }

func (m *banMaps) byName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{xdpDropMapBanV4: m.V4, xdpDropMapBanV6: m.V6, xdpDropMapBanBuckets: m.Buckets, xdpDropMapBanBloom: m.Bloom}
}

func (m *banMaps) Close() error {
	var err error
	for _, mm := range m.ordered() {
		err = errors.Join(err, mm.Close())
	}
	return err
}

// banIndex is user space's copy of one family's entries and the refcounts
// behind its bucket bitmaps.
type banIndex struct {
	entries map[netip.Prefix]banValue
	bans    int                  // entries that are bans, not allowed prefixes
	refs    map[uint32]uint32    // bucket<<8 | length → entries, lengths at least the bucket width
	long    map[uint32][2]uint64 // bucket → bitmap of those lengths
	short   [129]uint32          // length → entries shorter than the bucket width
	allow   map[int]int          // length of allowed prefixes → how many
}

// banValue is an entry as user space keeps it.
type banValue struct {
	end    uint64 // monotonic ns; the largest for an allowed prefix
	origin uint8
	allow  bool
}

const (
	banBuckets = int(xdpDropBanLimitsBAN_BUCKETS)
	// banWidth is the bucket width per family: shorter prefixes are in
	// every bucket of it.
	banWidth4, banWidth6 = 16, 48
)

func newBanTable(m *banMaps, max int) *BanTable {
	t := &BanTable{maps: m, max: max, bloomRefs: map[uint32]uint32{}, bloomWords: map[uint32]uint64{}, users: 1}
	for i := range t.index {
		t.index[i] = banIndex{entries: map[netip.Prefix]banValue{}, refs: map[uint32]uint32{}, long: map[uint32][2]uint64{}, allow: map[int]int{}}
	}
	return t
}

var errBansOff = errors.New("bans are not on in this instance's policy")

// Bans returns the instance's ban table, loading its maps the first time;
// an error when the policy has no bans (Policy.Bans.On). Every program of
// the instance, loaded before or after, runs on the same maps. After a
// handover call it once AdoptRules has run: the table is then the one
// handed over, its index rebuilt from the maps.
func (in *Instance) Bans() (*BanTable, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.bansLocked()
}

func (in *Instance) bansLocked() (*BanTable, error) {
	if !in.policy.Bans.On {
		return nil, errBansOff
	}
	if in.bans != nil {
		return in.bans, nil
	}
	rules, err := in.compiledLocked()
	if err != nil {
		return nil, err
	}
	spec, err := in.specOf(rules)
	if err != nil {
		return nil, err
	}
	if err := memlock(); err != nil {
		return nil, memlockError(err)
	}
	m := &banMaps{}
	if err := spec.LoadAndAssign(m, nil); err != nil {
		return nil, loadError(err)
	}
	in.bans = newBanTable(m, in.policy.Bans.max())
	return in.bans, nil
}

// banMapsByName are the instance's ban maps by their names in the ELF, for
// MapReplacements: none without bans.
func (in *Instance) banMapsByName() (map[string]*ebpf.Map, error) {
	if !in.policy.Bans.On {
		return nil, nil
	}
	t, err := in.Bans()
	if err != nil {
		return nil, err
	}
	return t.maps.byName(), nil
}

// setBanSpec sizes the ban maps and sets the bans' dry run; without bans
// the maps are not loaded.
func setBanSpec(spec *ebpf.CollectionSpec, policy Policy) error {
	if !policy.Bans.On {
		return nil
	}
	if err := policy.Bans.check(); err != nil {
		return err
	}
	if err := spec.Variables[xdpDropVarBanDryRun].Set(boolByte(policy.Bans.DryRun)); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarBanDryRun, err)
	}
	n := uint32(policy.Bans.max() + MaxBanAllow)
	spec.Maps[xdpDropMapBanV4].MaxEntries = n
	spec.Maps[xdpDropMapBanV6].MaxEntries = n
	return nil
}

// check checks the bans' settings of a policy.
func (c BansConfig) check() error {
	if c.Max < 0 || c.Max > MaxBanLimit {
		return fmt.Errorf("bans max %d is out of range: give 1 to %d, or 0 for %d", c.Max, MaxBanLimit, DefaultBanMax)
	}
	return nil
}

// monoClock reads the clock the kernel compares ends with (bpf_ktime_get_ns).
func monoClock() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

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

// writeBucket writes bucket b of family fam as the index has it.
func (t *BanTable) writeBucket(fam int, b uint32) error {
	x := &t.index[fam]
	v, s := x.long[b], x.shortBits()
	val := xdpDropBanBucket{Bits: [2]uint64{v[0] | s[0], v[1] | s[1]}}
	key := uint32(fam*banBuckets) + b
	if err := t.maps.Buckets.Update(key, &val, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write ban bucket %d: %w", key, err)
	}
	return nil
}

// writeAllBuckets writes every bucket of family fam, as a short length
// appearing or going changes them all.
func (t *BanTable) writeAllBuckets(fam int) error {
	x := &t.index[fam]
	s := x.shortBits()
	keys := make([]uint32, banBuckets)
	vals := make([]xdpDropBanBucket, banBuckets)
	for b := range keys {
		keys[b] = uint32(fam*banBuckets + b)
		v := x.long[uint32(b)]
		vals[b] = xdpDropBanBucket{Bits: [2]uint64{v[0] | s[0], v[1] | s[1]}}
	}
	if _, err := t.maps.Buckets.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("write ban buckets: %w", err)
	}
	return nil
}

// count adds d (1 or -1) to the refcount of p's length in its bucket (or
// every bucket), writing the bucket when its bit changes.
func (t *BanTable) count(p netip.Prefix, d int) error {
	fam := family(p)
	x := &t.index[fam]
	n := p.Bits()
	if n < widthOf(fam) {
		was := x.short[n]
		x.short[n] = uint32(int(was) + d)
		if (was == 0) != (x.short[n] == 0) {
			return t.writeAllBuckets(fam)
		}
		return nil
	}
	b := banBucketOf(p)
	k := b<<8 | uint32(n)
	was := x.refs[k]
	now := uint32(int(was) + d)
	if now == 0 {
		delete(x.refs, k)
	} else {
		x.refs[k] = now
	}
	if (was == 0) == (now == 0) {
		return nil
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
	return t.writeBucket(fam, b)
}

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

// bloom adds d (1 or -1) to the entries of p's bit in ban_bloom, writing
// its word when the bit changes.
func (t *BanTable) bloom(p netip.Prefix, d int) error {
	b := bloomBit(p)
	was := t.bloomRefs[b]
	now := uint32(int(was) + d)
	if now == 0 {
		delete(t.bloomRefs, b)
	} else {
		t.bloomRefs[b] = now
	}
	if (was == 0) == (now == 0) {
		return nil
	}
	word := b >> 6
	w := t.bloomWords[word]
	if now == 0 {
		w &^= 1 << (b & 63)
	} else {
		w |= 1 << (b & 63)
	}
	if w == 0 {
		delete(t.bloomWords, word)
	} else {
		t.bloomWords[word] = w
	}
	if err := t.maps.Bloom.Update(word, w, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write ban filter word %d: %w", word, err)
	}
	return nil
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

func (t *BanTable) hashOf(fam int) *ebpf.Map {
	if fam == 0 {
		return t.maps.V4
	}
	return t.maps.V6
}

// put writes p's entry, then counts it in its bucket when it is new.
func (t *BanTable) put(p netip.Prefix, v banValue) error {
	fam := family(p)
	x := &t.index[fam]
	kind := uint8(xdpDropBanLimitsBAN_KIND_BAN)
	if v.allow {
		kind = uint8(xdpDropBanLimitsBAN_KIND_ALLOW)
	}
	val := xdpDropBanValue{End: v.end, Origin: v.origin, Kind: kind}
	if err := t.hashOf(fam).Update(kernelKey(p), &val, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write ban entry %s: %w", p, err)
	}
	old, had := x.entries[p]
	x.entries[p] = v
	if had {
		if old.allow != v.allow {
			x.adjust(old, -1, p)
			x.adjust(v, 1, p)
		}
		return nil
	}
	x.adjust(v, 1, p)
	if err := t.bloom(p, 1); err != nil {
		return err
	}
	return t.count(p, 1)
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

// remove clears p's bit when it was the last of its length there, then
// deletes its entry.
func (t *BanTable) remove(p netip.Prefix) error {
	fam := family(p)
	x := &t.index[fam]
	v, ok := x.entries[p]
	if !ok {
		return nil
	}
	if err := t.count(p, -1); err != nil {
		return err
	}
	if err := t.bloom(p, -1); err != nil {
		return err
	}
	delete(x.entries, p)
	x.adjust(v, -1, p)
	if err := t.hashOf(fam).Delete(kernelKey(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete ban entry %s: %w", p, err)
	}
	return nil
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

// SetAllow makes prefixes the allowed ones, replacing those set before:
// a source inside one is never dropped by a ban. Bans inside a newly
// allowed prefix are lifted (lifted counts them); a ban that covers an
// allowed prefix stays and bans the rest. At most MaxBanAllow per family.
func (t *BanTable) SetAllow(prefixes []netip.Prefix) (lifted int, err error) {
	want := map[netip.Prefix]bool{}
	var per [2]int
	for _, p := range prefixes {
		n, err := normalize(p)
		if err != nil {
			return 0, fmt.Errorf("allowed prefix: %w", err)
		}
		if !want[n] {
			want[n] = true
			per[family(n)]++
		}
	}
	for fam, n := range per {
		if n > MaxBanAllow {
			return 0, fmt.Errorf("%d allowed prefixes of IPv%d, more than the %d the ban maps hold: merge them into fewer, wider prefixes", n, 4+2*fam, MaxBanAllow)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// New allowed prefixes first: a source allowed before and after stays
	// allowed throughout.
	for p := range want {
		x := &t.index[family(p)]
		if v, ok := x.entries[p]; ok && v.allow {
			continue
		}
		// Bans inside it, or on it, go: the longest match would let them win.
		for q, v := range x.entries {
			if !v.allow && q.Bits() >= p.Bits() && p.Contains(q.Addr()) {
				if err := t.remove(q); err != nil {
					return lifted, err
				}
				lifted++
			}
		}
		if err := t.put(p, banValue{end: math.MaxUint64, allow: true}); err != nil {
			return lifted, err
		}
	}
	for fam := range t.index {
		x := &t.index[fam]
		for p, v := range x.entries {
			if v.allow && !want[p] {
				if err := t.remove(p); err != nil {
					return lifted, err
				}
			}
		}
	}
	return lifted, nil
}

// Ban puts a ban on p (masked to its length) from now until end, by
// origin (< BanOrigins). A prefix banned already gets the new end and
// origin. The outcome says whether it is in force; an error is a failed
// write or bad input (an end that passed, a /0, an origin out of range).
func (t *BanTable) Ban(p netip.Prefix, end time.Time, origin uint8) (BanOutcome, error) {
	p, err := normalize(p)
	if err != nil {
		return 0, fmt.Errorf("ban: %w", err)
	}
	if origin >= BanOrigins {
		return 0, fmt.Errorf("ban on %s: origin %d is out of range: give 0 to %d", p, origin, BanOrigins-1)
	}
	wallNow, monoNow := time.Now(), monoClock()
	if !end.After(wallNow) {
		return 0, fmt.Errorf("ban on %s: its end %s has passed", p, end.Format(time.RFC3339))
	}
	v := banValue{end: monoOf(end, wallNow, monoNow), origin: origin}
	t.mu.Lock()
	defer t.mu.Unlock()
	x := &t.index[family(p)]
	if x.allowedBy(p) {
		return BanRefusedAllowed, nil
	}
	if old, ok := x.entries[p]; ok {
		if old == v {
			return BanUnchanged, nil
		}
		if err := t.put(p, v); err != nil {
			return 0, err
		}
		return BanUpdated, nil
	}
	if x.bans >= t.max {
		return BanRefusedFull, nil
	}
	if err := t.put(p, v); err != nil {
		return 0, err
	}
	return BanAdded, nil
}

// Lift removes the ban on p at once, reporting whether there was one.
func (t *BanTable) Lift(p netip.Prefix) (bool, error) {
	p, err := normalize(p)
	if err != nil {
		return false, fmt.Errorf("lift: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.index[family(p)].entries[p]; !ok || v.allow {
		return false, nil
	}
	return true, t.remove(p)
}

// Expire removes the bans whose end is not after now, returning how many.
// The kernel stopped applying them at their end already.
func (t *BanTable) Expire(now time.Time) (n int, err error) {
	cut := monoOf(now, time.Now(), monoClock())
	t.mu.Lock()
	defer t.mu.Unlock()
	for fam := range t.index {
		for p, v := range t.index[fam].entries {
			if v.allow || v.end > cut {
				continue
			}
			if err := t.remove(p); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// InForce counts the bans held whose end is still ahead, per family.
func (t *BanTable) InForce() (v4, v6 int) {
	now := monoClock()
	t.mu.Lock()
	defer t.mu.Unlock()
	var n [2]int
	for fam := range t.index {
		for _, v := range t.index[fam].entries {
			if !v.allow && v.end > now {
				n[fam]++
			}
		}
	}
	return n[0], n[1]
}

// Entries lists the bans held (allowed prefixes left out), by prefix, for
// a resync after a handover: their prefixes, ends and origins.
func (t *BanTable) Entries() []BanEntry {
	wallNow, monoNow := time.Now(), monoClock()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []BanEntry
	for fam := range t.index {
		for p, v := range t.index[fam].entries {
			if v.allow {
				continue
			}
			left := time.Duration(math.MaxInt64)
			if v.end-monoNow < math.MaxInt64 || v.end < monoNow {
				left = time.Duration(int64(v.end - monoNow))
			}
			end := wallNow.Add(left).Round(0)
			out = append(out, BanEntry{Prefix: p, End: end, Origin: v.origin})
		}
	}
	slices.SortFunc(out, func(a, b BanEntry) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	return out
}

// Memory is the kernel memory the ban maps take, as the kernel accounts it.
func (t *BanTable) Memory() (uint64, error) {
	var total uint64
	for name, m := range t.maps.byName() {
		n, err := mapMemory(m)
		if err != nil {
			return 0, fmt.Errorf("read map %s info: %w", name, err)
		}
		total += n
	}
	return total, nil
}

// rebuild makes the index again from the maps, handed over by another
// instance, and writes every bucket as the entries make it.
func (t *BanTable) rebuild() error {
	var k4 xdpDropBanV4Key
	var k6 xdpDropBanV6Key
	var v xdpDropBanValue
	add := func(p netip.Prefix) {
		x := &t.index[family(p)]
		bv := banValue{end: v.End, origin: v.Origin, allow: v.Kind == uint8(xdpDropBanLimitsBAN_KIND_ALLOW)}
		x.entries[p] = bv
		x.adjust(bv, 1, p)
		bb := bloomBit(p)
		t.bloomRefs[bb]++
		t.bloomWords[bb>>6] |= 1 << (bb & 63)
		n := p.Bits()
		if n < widthOf(family(p)) {
			x.short[n]++
			return
		}
		b := banBucketOf(p)
		x.refs[b<<8|uint32(n)]++
		bits := x.long[b]
		bit(&bits, n)
		x.long[b] = bits
	}
	it := t.maps.V4.Iterate()
	for it.Next(&k4, &v) {
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], k4.Addr)
		add(netip.PrefixFrom(netip.AddrFrom4(a), int(k4.Len)))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read handed-over IPv4 bans: %w", err)
	}
	it = t.maps.V6.Iterate()
	for it.Next(&k6, &v) {
		var a [16]byte
		for i, w := range k6.Addr {
			binary.NativeEndian.PutUint32(a[4*i:], w)
		}
		add(netip.PrefixFrom(netip.AddrFrom16(a), int(k6.Len)))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read handed-over IPv6 bans: %w", err)
	}
	words := uint32(1) << (xdpDropBanLimitsBAN_BLOOM_BITS - 6)
	keys := make([]uint32, words)
	vals := make([]uint64, words)
	for i := range keys {
		keys[i], vals[i] = uint32(i), t.bloomWords[uint32(i)]
	}
	if _, err := t.maps.Bloom.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("write ban filter: %w", err)
	}
	for fam := range t.index {
		if err := t.writeAllBuckets(fam); err != nil {
			return err
		}
	}
	return nil
}

// BanCounters returns the frames bans decided on the program's interface,
// by origin and action, summed over CPUs; zero without bans.
func (p *Program) BanCounters() (BanCounts, error) {
	var out BanCounts
	m, err := p.banCountersMap()
	if m == nil || err != nil {
		return out, err
	}
	var per []xdpDropBanBlock
	if err := m.Lookup(uint32(0), &per); err != nil {
		return out, fmt.Errorf("read ban counters: %w", err)
	}
	for _, b := range per {
		for o := range out {
			for a := range out[o] {
				out[o][a].Packets += b.C[o][a].Packets
				out[o][a].Bytes += b.C[o][a].Bytes
			}
		}
	}
	return out, nil
}

// banCountersMap is the program's ban_counters, found among the maps of a
// program taken over in place the first time; nil without bans.
func (p *Program) banCountersMap() (*ebpf.Map, error) {
	if p.banCounters != nil || !p.in.policy.Bans.On {
		return p.banCounters, nil
	}
	info, err := p.objs.Prog.Info()
	if err != nil {
		return nil, fmt.Errorf("read XDP program info: %w", err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil && mi.Name == xdpDropMapBanCounters {
			p.banCounters = m
			return m, nil
		}
		m.Close()
	}
	return nil, errors.New("the program has no ban counters")
}

// addBanMaps puts the ban maps of in, the program's instance or the one it
// swaps into, and the program's ban counters (made the first time) in
// replace; nothing without bans.
func (p *Program) addBanMaps(in *Instance, spec *ebpf.CollectionSpec, replace map[string]*ebpf.Map) error {
	shared, err := in.banMapsByName()
	if err != nil || shared == nil {
		return err
	}
	for name, m := range shared {
		replace[name] = m
	}
	if p.banCounters == nil && p.objs.Prog != nil {
		// A program taken over in place: its variants go on with its counters.
		p.banCountersMap()
	}
	if p.banCounters == nil {
		m, err := ebpf.NewMap(spec.Maps[xdpDropMapBanCounters])
		if err != nil {
			return fmt.Errorf("create ban counters: %w", err)
		}
		p.banCounters = m
	}
	replace[xdpDropMapBanCounters] = p.banCounters
	return nil
}

func (p *Program) closeBanCounters() error {
	if p.banCounters == nil {
		return nil
	}
	err := p.banCounters.Close()
	p.banCounters = nil
	return err
}

// Bans is the ban table of the program's instance (Instance.Bans): for a
// program of Load, which has an instance of its own.
func (p *Program) Bans() (*BanTable, error) { return p.in.Bans() }
