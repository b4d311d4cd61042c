//go:build linux

package bpf

import (
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
// the rules, a ban in force decides it, an expired one is skipped, and a
// limit (Limit) drops the frames over its rate and skips the others. The
// kernel stops a ban at its end whatever user space does; Expire removes
// it. Entries are written before their bit is set and deleted after it is
// cleared, so the program never misses an entry it should see.
//
// Each origin owns its claims: a prefix several origins ban is one entry,
// whose end is the latest claim's and whose origin (the one its frames are
// counted under) is the first to have banned it while that claim holds.
// A drop claim in force wins over the limit claims. The entry keeps every
// origin's end and rate, which no program reads, so that a successor
// rebuilds every claim from the maps. Lift and Expire remove one
// origin's claims only.
//
// Memory: the hashes are preallocated for Max bans plus MaxBanAllow allowed
// prefixes per family. Worst case per entry in the kernel: 184 bytes for
// IPv4 and 200 for IPv6 (a hash element of 152 or 168 bytes, the claims'
// 48 and a limit's 32 included, and its share of the hash's bucket heads, 16 bytes each
// and a power of two of them: up to 32 bytes), plus 3 MiB whatever Max (2
// MiB of buckets, 1 MiB of filter); user space keeps about 175 bytes more
// per entry. For the default Max of 100,000 the kernel accounts 44.6 MB
// (Memory measures it; 80.8 MB for 200,000, 9.4 MB for 1).
//
// A BanTable is safe for concurrent use.
type BanTable struct {
	mu     sync.Mutex
	maps   *banMaps
	max    int
	index  [2]banIndex // by family: 0 IPv4, 1 IPv6
	filter banFilter   // ban_bloom's bits and what holds them
	// users are the instances sharing the table (ContinueBans): the last
	// to close it closes the maps.
	users int
	// history is the ban history (banhistory.go); nil until a ban is
	// remembered or one is handed over.
	history *ebpf.Map
	// flow is the FlowSpec tables loaded with the ban maps; nil without FlowSpec.
	flow *flowState
}

func newBanTable(m *banMaps, max int) *BanTable {
	t := &BanTable{maps: m, max: max, filter: newBanFilter(), users: 1}
	for i := range t.index {
		t.index[i] = newBanIndex()
	}
	return t
}

// writeBucket writes bucket b of family fam as the index has it.
func (t *BanTable) writeBucket(fam int, b uint32) error {
	val := t.index[fam].bucket(b)
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
	keys := make([]uint32, banBuckets)
	vals := make([]xdpDropBanBucket, banBuckets)
	for b := range keys {
		keys[b] = uint32(fam*banBuckets + b)
		vals[b] = x.bucket(uint32(b))
	}
	if _, err := t.maps.Buckets.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("write ban buckets: %w", err)
	}
	return nil
}

// count adds d (1 or -1) to the refcount of p's length in its bucket (or
// every bucket), writing the buckets whose bits changed.
func (t *BanTable) count(p netip.Prefix, d int) error {
	fam := family(p)
	switch b, change := t.index[fam].count(p, d); change {
	case bucketOne:
		return t.writeBucket(fam, b)
	case bucketsAll:
		return t.writeAllBuckets(fam)
	}
	return nil
}

// bloom adds d (1 or -1) to the entries of p's bit in ban_bloom, writing
// its word when the bit changes.
func (t *BanTable) bloom(p netip.Prefix, d int) error {
	word, w, changed := t.filter.count(p, d)
	if !changed {
		return nil
	}
	if err := t.maps.Bloom.Update(word, w, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write ban filter word %d: %w", word, err)
	}
	return nil
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
	val := v.kernel()
	old, had := x.entries[p]
	if had && val.Interval != 0 {
		// The rate spent goes on: a rewrite gives no new burst, bar the frames that race it.
		var cur xdpDropBanValue
		if err := t.hashOf(fam).Lookup(kernelKey(p), &cur); err == nil {
			val.Tat = cur.Tat
		}
	}
	if err := t.hashOf(fam).Update(kernelKey(p), &val, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write ban entry %s: %w", p, err)
	}
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

// SetAllow makes prefixes the allowed ones, replacing those set before:
// a source inside one is never dropped by a ban. Bans inside a newly
// allowed prefix are lifted, every origin's claim (lifted counts the
// claims); a ban that covers an allowed prefix stays and bans the rest.
// At most MaxBanAllow per family.
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
				lifted += v.holders()
			}
		}
		if err := t.put(p, banValue{allow: true}); err != nil {
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

// Ban puts origin's (< BanOrigins) claim on p (masked to its length), from
// now until end, as a drop. Each origin holds its own claim: the prefix is
// banned until the latest claim's end, and its frames are counted under
// the origin that banned it first, while that origin's claim is in force
// (then under the claim in force that lasts longest). A claim of an
// origin on a prefix it holds already gets the new end, and is a drop
// from then on if it was a limit (Limit). The outcome says whether it is
// in force: a claim on a prefix another origin holds is not a new entry,
// never refused as over Max. An error is a failed write or bad input (an
// end that passed, a /0, an origin out of range).
func (t *BanTable) Ban(p netip.Prefix, end time.Time, origin uint8) (BanOutcome, error) {
	return t.claim("ban", p, end, origin, 0)
}

// Limit puts origin's (< BanOrigins) claim on p (masked to its length),
// from now until end, as a limit: the prefix's frames, all its sources
// and CPUs together, pass at pps (1 to MaxBanLimitPPS) frames a second
// with a burst of max(pps/10, 1) frames (a GCRA cell in the entry, as
// limit rules have), and those over it are dropped, counted under origin
// as Ban's drops are (would_drop in a bans dry run). Frames within the
// rate go on to the bans of shorter prefixes, then to the rules, as
// unbanned frames. A drop claim of any origin in force wins over every
// limit claim; when it ends before a limit claim, the kernel limits from
// then on by itself. With several limit claims, the one that lasts
// longest sets the rate. Limit on origin's drop claim makes it a limit
// with the new end, and Ban on its limit claim a drop. Outcomes and
// errors are Ban's (BanUpdated: the end or the rate changed, or the
// drop became a limit), and an error for a pps out of range.
func (t *BanTable) Limit(p netip.Prefix, end time.Time, origin uint8, pps uint64) (BanOutcome, error) {
	if pps < 1 || pps > MaxBanLimitPPS {
		return 0, fmt.Errorf("limit on %s: %d frames a second is out of range: give 1 to %d", p, pps, uint64(MaxBanLimitPPS))
	}
	return t.claim("limit", p, end, origin, uint32(pps))
}

// claim puts origin's claim on p until end: a drop for pps 0, else a
// limit of pps frames a second. what names the call in errors.
func (t *BanTable) claim(what string, p netip.Prefix, end time.Time, origin uint8, pps uint32) (BanOutcome, error) {
	p, err := normalize(p)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if origin >= BanOrigins {
		return 0, fmt.Errorf("%s on %s: origin %d is out of range: give 0 to %d", what, p, origin, BanOrigins-1)
	}
	wallNow, monoNow := time.Now(), monoClock()
	if !end.After(wallNow) {
		return 0, fmt.Errorf("%s on %s: its end %s has passed", what, p, end.Format(time.RFC3339))
	}
	claim := max(monoOf(end, wallNow, monoNow), 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	x := &t.index[family(p)]
	if x.allowedBy(p) {
		return BanRefusedAllowed, nil
	}
	v, held := x.entries[p]
	if held {
		if v.claims[origin] == claim && v.pps[origin] == pps {
			return BanUnchanged, nil
		}
	} else if x.bans >= t.max {
		return BanRefusedFull, nil
	} else {
		v.origin = origin
	}
	had := v.claims[origin] != 0
	v.claims[origin], v.pps[origin] = claim, pps
	v.name(monoNow)
	if err := t.put(p, v); err != nil {
		return 0, err
	}
	if had {
		return BanUpdated, nil
	}
	return BanAdded, nil
}

// Lift removes origin's claim on p at once, reporting whether it had one.
// The other origins' claims stay: p is lifted when none is left.
func (t *BanTable) Lift(p netip.Prefix, origin uint8) (bool, error) {
	p, err := normalize(p)
	if err != nil {
		return false, fmt.Errorf("lift: %w", err)
	}
	if origin >= BanOrigins {
		return false, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.index[family(p)].entries[p]
	if !ok || v.allow || v.claims[origin] == 0 {
		return false, nil
	}
	return true, t.unclaim(p, v, origin, monoClock())
}

// unclaim removes origin's claim from p's entry v: the entry is rewritten
// to the claims left, or removed with the last.
func (t *BanTable) unclaim(p netip.Prefix, v banValue, origin uint8, now uint64) error {
	v.claims[origin], v.pps[origin] = 0, 0
	if !v.claimed() {
		return t.remove(p)
	}
	v.name(now)
	return t.put(p, v)
}

// Expire removes origin's claims whose end is not after now, returning
// how many; the kernel stopped applying them at their end already, and
// the other origins' claims stay. An entry whose frames are counted under
// a claim that ended is rewritten to count them under one in force.
func (t *BanTable) Expire(now time.Time, origin uint8) (n int, err error) {
	if origin >= BanOrigins {
		return 0, nil
	}
	monoNow := monoClock()
	cut := monoOf(now, time.Now(), monoNow)
	t.mu.Lock()
	defer t.mu.Unlock()
	for fam := range t.index {
		for p, v := range t.index[fam].entries {
			if v.allow {
				continue
			}
			if c := v.claims[origin]; c != 0 && c <= cut {
				if err := t.unclaim(p, v, origin, monoNow); err != nil {
					return n, err
				}
				n++
				continue
			}
			if v.claims[v.origin] > monoNow {
				continue
			}
			named := v
			if named.name(monoNow); named.origin != v.origin {
				if err := t.put(p, named); err != nil {
					return n, err
				}
			}
		}
	}
	return n, nil
}

// InForce counts the prefixes banned whose end is still ahead, whichever
// origins hold them, per family.
func (t *BanTable) InForce() (v4, v6 int) {
	return t.inForce(func(v banValue, now uint64) bool { return v.end() > now })
}

// InForceOf counts origin's claims whose end is still ahead, per family.
func (t *BanTable) InForceOf(origin uint8) (v4, v6 int) {
	if origin >= BanOrigins {
		return 0, 0
	}
	return t.inForce(func(v banValue, now uint64) bool { return v.claims[origin] > now })
}

func (t *BanTable) inForce(holds func(v banValue, now uint64) bool) (v4, v6 int) {
	now := monoClock()
	t.mu.Lock()
	defer t.mu.Unlock()
	var n [2]int
	for fam := range t.index {
		for _, v := range t.index[fam].entries {
			if !v.allow && holds(v, now) {
				n[fam]++
			}
		}
	}
	return n[0], n[1]
}

// Entries lists the claims held, one per origin and prefix (allowed
// prefixes left out), by prefix and origin, for a resync after a handover:
// their prefixes, ends, origins and, for a limit claim, its rate.
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
			for o, c := range v.claims {
				if c == 0 {
					continue
				}
				left := time.Duration(math.MaxInt64)
				if c-monoNow < math.MaxInt64 || c < monoNow {
					left = time.Duration(int64(c - monoNow))
				}
				out = append(out, BanEntry{Prefix: p, End: wallNow.Add(left).Round(0), Origin: uint8(o), LimitPPS: uint64(v.pps[o])})
			}
		}
	}
	slices.SortFunc(out, func(a, b BanEntry) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		if c := a.Prefix.Bits() - b.Prefix.Bits(); c != 0 {
			return c
		}
		return int(a.Origin) - int(b.Origin)
	})
	return out
}

// monoClock reads the clock the kernel compares ends with (bpf_ktime_get_ns).
func monoClock() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
