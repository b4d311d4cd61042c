package bans

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
)

// fakeBanTable is a ban table in memory, as the kernel's behaves for one
// origin: max bans, allowed prefixes refused, ends swept by Expire.
type fakeBanTable struct {
	max   int
	allow []netip.Prefix
	bans  map[netip.Prefix]time.Time
	lifts []netip.Prefix
	// monoBehind: Expire removes nothing, as a kernel whose monotonic
	// clock lags the wall clock the state ends decisions by.
	monoBehind bool
}

func newFakeBanTable(max int, allow ...netip.Prefix) *fakeBanTable {
	return &fakeBanTable{max: max, allow: allow, bans: map[netip.Prefix]time.Time{}}
}

func (f *fakeBanTable) Ban(p netip.Prefix, end time.Time, _ uint8) (bpf.BanOutcome, error) {
	for _, a := range f.allow {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return bpf.BanRefusedAllowed, nil
		}
	}
	if _, ok := f.bans[p]; ok {
		f.bans[p] = end
		return bpf.BanUpdated, nil
	}
	if len(f.bans) >= f.max {
		return bpf.BanRefusedFull, nil
	}
	f.bans[p] = end
	return bpf.BanAdded, nil
}

func (f *fakeBanTable) Lift(p netip.Prefix, _ uint8) (bool, error) {
	_, ok := f.bans[p]
	if ok {
		delete(f.bans, p)
		f.lifts = append(f.lifts, p)
	}
	return ok, nil
}

func (f *fakeBanTable) Expire(now time.Time, _ uint8) (int, error) {
	if f.monoBehind {
		return 0, nil // the kernel's clock has not reached the ends yet
	}
	n := 0
	for p, end := range f.bans {
		if !end.After(now) {
			delete(f.bans, p)
			n++
		}
	}
	return n, nil
}

func (f *fakeBanTable) Entries() []bpf.BanEntry {
	var out []bpf.BanEntry
	for p, end := range f.bans {
		out = append(out, bpf.BanEntry{Prefix: p, End: end, Origin: bpf.BanOriginCrowdSec})
	}
	return out
}

// newBanState is the decisions of CrowdSec's origin, unbounded.
func newBanState() *Decisions { return NewDecisions(bpf.BanOriginCrowdSec, 0, nil) }

func decision(id int64, prefix string, d time.Duration) crowdsec.Decision {
	return crowdsec.Decision{ID: id, Type: "ban", Scope: "Range", Value: prefix, Prefix: netip.MustParsePrefix(prefix), Duration: d}
}

// typed is dec of another type: another key on the same value.
func typed(dec crowdsec.Decision, typ string) crowdsec.Decision {
	dec.Type = typ
	return dec
}

// TestBanStateSeveralDecisionsOnePrefix: a prefix two decisions of two
// keys (two types) cover is banned until the later end; deleting that one
// moves the end back to the other's, and deleting the last lifts it.
func TestBanStateSeveralDecisionsOnePrefix(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := netip.MustParsePrefix("203.0.113.0/24")
	table := newFakeBanTable(10)
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Hour),
		typed(decision(2, "203.0.113.0/24", 2*time.Hour), "captcha"),
	}}, now))
	require.Equal(t, now.Add(2*time.Hour), table.bans[p], "banned until the later end")

	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{typed(decision(2, "203.0.113.0/24", 2*time.Hour), "captcha")}}, now))
	require.Equal(t, now.Add(time.Hour), table.bans[p], "the later decision deleted: banned until the other's end")
	require.Empty(t, table.lifts)

	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{decision(1, "203.0.113.0/24", time.Hour)}}, now))
	require.NotContains(t, table.bans, p, "the last decision deleted: lifted")
	require.Equal(t, Counts{Added: 1, Removed: 1}, s.counts)
}

// TestBanStateDeletedByKey: the LAPI keeps one decision per scope, value
// and type, and names it by the id of any decision of that key. A brief
// sent as new under id 2 and deleted under id 1 (two scenarios on one
// address, as the sshd collection makes) is lifted; a key sent again under
// another id takes the place of the one held (its end, not the later of
// the two), at a full list as in a delta; a deletion of one key leaves
// another key on the same prefix in force.
func TestBanStateDeletedByKey(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ssh := netip.MustParsePrefix("198.51.100.7/32")
	ip := func(id int64, d time.Duration) crowdsec.Decision {
		return crowdsec.Decision{ID: id, Type: "ban", Scope: "Ip", Value: "198.51.100.7", Prefix: ssh, Duration: d}
	}
	table := newFakeBanTable(10)
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{ip(2, 4*time.Hour)}}, now))
	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{ip(1, -time.Millisecond)}}, now.Add(time.Minute)))
	require.NotContains(t, table.bans, ssh, "deleted under the other id: lifted")
	require.Equal(t, Counts{Added: 1, Removed: 1}, s.counts)
	require.Empty(t, s.decisions)

	// A full list that names the key under another id: the ban holds, at the list's end.
	require.NoError(t, s.Apply(table, crowdsec.Delta{New: []crowdsec.Decision{ip(3, 4*time.Hour)}}, now))
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{ip(4, time.Hour)}}, now))
	require.Equal(t, now.Add(time.Hour), table.bans[ssh], "the list's decision took the key's place")
	require.Len(t, s.decisions, 1)
	require.Equal(t, Counts{Added: 2, Removed: 1}, s.counts, "no lift and ban again across the full list")

	// A delta's new of the key (a longer decision) takes its place too; then two keys on one prefix.
	require.NoError(t, s.Apply(table, crowdsec.Delta{New: []crowdsec.Decision{ip(5, 2*time.Hour), typed(ip(6, 3*time.Hour), "captcha")}}, now))
	require.Len(t, s.decisions, 2)
	require.Equal(t, now.Add(3*time.Hour), table.bans[ssh])
	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{typed(ip(7, 0), "captcha")}}, now))
	require.Equal(t, now.Add(2*time.Hour), table.bans[ssh], "the captcha's key deleted: the ban's stands")
	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{ip(4, 0)}}, now))
	require.NotContains(t, table.bans, ssh)
	require.Equal(t, Counts{Added: 2, Removed: 2}, s.counts)
}

// TestBanStateResyncLiftsWhatTheListLacks: a full list lifts the bans of
// decisions it no longer holds (deleted while the feed was away) and bans
// in the table no decision of this process holds (a predecessor's), and
// keeps the rest with their ends.
func TestBanStateResyncLiftsWhatTheListLacks(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(10)
	stranger := netip.MustParsePrefix("198.51.100.7/32")
	kept := netip.MustParsePrefix("198.51.100.9/32")
	table.bans[stranger] = now.Add(time.Hour) // a predecessor's ban the LAPI no longer has
	table.bans[kept] = now.Add(time.Hour)     // a predecessor's ban the LAPI still has
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Hour),
		decision(2, "192.0.2.1/32", time.Hour),
		decision(3, "198.51.100.9/32", 3*time.Hour),
	}}, now))
	require.ElementsMatch(t, []netip.Prefix{stranger}, table.lifts)
	require.Equal(t, now.Add(3*time.Hour), table.bans[kept], "a ban held already takes the list's end")

	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Hour),
		decision(3, "198.51.100.9/32", 3*time.Hour),
	}}, now.Add(time.Minute)))
	require.ElementsMatch(t, []netip.Prefix{stranger, netip.MustParsePrefix("192.0.2.1/32")}, table.lifts)
	require.Len(t, table.bans, 2)
	require.Equal(t, int64(2), s.counts.Removed)
	require.Equal(t, int64(2), s.counts.Added, "the table had one of the three already")
}

// TestBanStateExpiry: the sweep removes the bans past their end, counts
// them and forgets their decisions: a later delete of one lifts nothing.
func TestBanStateExpiry(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(10)
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Second),
		decision(2, "192.0.2.1/32", time.Hour),
		decision(3, "2001:db8::/48", -time.Second), // over already
	}}, now))
	require.Len(t, table.bans, 2)
	require.NoError(t, s.Expire(table, now.Add(2*time.Second)))
	require.Len(t, table.bans, 1)
	require.Equal(t, int64(1), s.counts.Expired)
	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{decision(1, "203.0.113.0/24", time.Hour)}}, now.Add(3*time.Second)))
	require.Empty(t, table.lifts)
	require.Equal(t, Counts{Added: 2, Expired: 1}, s.counts)
}

// TestBanStateRefused: decisions the table refuses (over max, allowed)
// and those the feed ignored (unsupported) are counted refused and held
// by no prefix.
func TestBanStateRefused(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(2, netip.MustParsePrefix("192.0.2.0/24"))
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{
		Startup: true,
		New: []crowdsec.Decision{
			decision(1, "203.0.113.0/24", time.Hour),
			decision(2, "192.0.2.128/25", time.Hour), // allowed
			decision(3, "198.51.100.1/32", time.Hour),
			decision(4, "198.51.100.2/32", time.Hour), // over max
		},
		Ignored: map[crowdsec.Reason]int{crowdsec.IgnoredScope: 3, crowdsec.IgnoredValue: 1},
	}, now))
	require.Len(t, table.bans, 2)
	require.Equal(t, Counts{Added: 2, Refused: 6}, s.counts)
	require.Len(t, s.decisions, 2)
}

// TestBanStateDeletedAtItsEnd: the LAPI lists a decision past its end as
// deleted, as it does one deleted by hand: when that comes before the
// sweep, the ban is lifted and counted expired, not removed.
func TestBanStateDeletedAtItsEnd(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(10)
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Second),
		decision(2, "192.0.2.1/32", time.Hour),
	}}, now))
	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", -time.Millisecond),
		decision(2, "192.0.2.1/32", -time.Millisecond),
	}}, now.Add(time.Second)))
	require.Empty(t, table.bans)
	require.Equal(t, Counts{Added: 2, Removed: 1, Expired: 1}, s.counts)
}

// nopBanTable puts every ban in force and holds nothing: the state's own
// memory is what is measured.
type nopBanTable struct{}

func (nopBanTable) Ban(netip.Prefix, time.Time, uint8) (bpf.BanOutcome, error) {
	return bpf.BanAdded, nil
}
func (nopBanTable) Lift(netip.Prefix, uint8) (bool, error) { return true, nil }
func (nopBanTable) Expire(time.Time, uint8) (int, error)   { return 0, nil }
func (nopBanTable) Entries() []bpf.BanEntry                { return nil }

// TestBanStateMemory: the decisions held cost at most maxBanStateBytes a
// ban, the figure the README's worst case adds to the kernel's.
func TestBanStateMemory(t *testing.T) {
	const n, maxBanStateBytes = 200_000, 200
	d := crowdsec.Delta{Startup: true}
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		d.New = append(d.New, crowdsec.Decision{ID: int64(i + 1), Prefix: netip.PrefixFrom(a, 32), Duration: time.Hour})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newBanState()
	require.NoError(t, s.Apply(nopBanTable{}, d, time.Now()))
	runtime.GC()
	runtime.ReadMemStats(&after)
	perBan := (after.HeapAlloc - before.HeapAlloc) / n
	t.Logf("%d bytes a ban", perBan)
	require.LessOrEqual(t, perBan, uint64(maxBanStateBytes))
	runtime.KeepAlive(s)
	runtime.KeepAlive(d) // the answer is the feed's, not counted here
}

// TestBanStateBoundsDecisions: decisions on one prefix beyond
// maxDecisionsPerPrefix, and beyond the state's limit overall, are refused
// and counted, and each costs bounded work: 20,000 on one prefix hold 64.
func TestBanStateBoundsDecisions(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(10)
	s := newBanState()
	d := crowdsec.Delta{Startup: true}
	for i := range 20_000 {
		d.New = append(d.New, typed(decision(int64(i+1), "203.0.113.0/24", time.Hour+time.Duration(i)), fmt.Sprint("type-", i)))
	}
	start := time.Now()
	require.NoError(t, s.Apply(table, d, now))
	t.Logf("20,000 decisions on one prefix applied in %s", time.Since(start))
	require.Equal(t, maxDecisionsPerPrefix, len(s.decisions))
	require.Equal(t, maxDecisionsPerPrefix, len(s.prefixes[netip.MustParsePrefix("203.0.113.0/24")].ids))
	require.Equal(t, Counts{Added: 1, Refused: 20_000 - maxDecisionsPerPrefix}, s.counts)
	require.Equal(t, now.Add(time.Hour+maxDecisionsPerPrefix-1), table.bans[netip.MustParsePrefix("203.0.113.0/24")])

	// A decision held already is updated, not refused, at the bound.
	require.NoError(t, s.Apply(table, crowdsec.Delta{New: []crowdsec.Decision{typed(decision(1, "203.0.113.0/24", 2*time.Hour), "type-0")}}, now))
	require.Equal(t, now.Add(2*time.Hour), table.bans[netip.MustParsePrefix("203.0.113.0/24")])
	require.Equal(t, int64(20_000-maxDecisionsPerPrefix), s.counts.Refused)

	limited := newBanState()
	limited.limit = 4
	table = newFakeBanTable(10)
	require.NoError(t, limited.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "192.0.2.1/32", time.Hour), decision(2, "192.0.2.2/32", time.Hour),
		decision(3, "192.0.2.3/32", time.Hour), decision(4, "192.0.2.4/32", time.Hour),
		decision(5, "192.0.2.5/32", time.Hour), decision(6, "192.0.2.6/32", time.Hour),
	}}, now))
	require.Len(t, limited.decisions, 4)
	require.Len(t, table.bans, 4)
	require.Equal(t, Counts{Added: 4, Refused: 2}, limited.counts)
}

// TestBanStateExpiryLiftsWhatItForgets: when the wall clock says a
// prefix's last decision ended but the kernel's monotonic clock has not
// reached its end, the state lifts the prefix as it forgets the decision.
func TestBanStateExpiryLiftsWhatItForgets(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(10)
	table.monoBehind = true
	s := newBanState()
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Second),
		decision(2, "203.0.113.0/24", 3*time.Second),
		decision(3, "192.0.2.1/32", time.Hour),
	}}, now))
	require.NoError(t, s.Expire(table, now.Add(2*time.Second)))
	require.Len(t, table.bans, 2, "decision 2 still holds 203.0.113.0/24")
	require.NoError(t, s.Expire(table, now.Add(4*time.Second)))
	require.Equal(t, map[netip.Prefix]time.Time{netip.MustParsePrefix("192.0.2.1/32"): now.Add(time.Hour)}, table.bans)
	require.Equal(t, Counts{Added: 2, Expired: 1}, s.counts)
	require.Len(t, s.decisions, 1)
}

// TestBanStateRetriesRefused: decisions refused over max or as
// allow-listed are retried by the next full list once room came back (a
// full pull is then due), and a prefix held but lifted from the table (by
// an allowed prefix since removed) is banned again by a full list.
func TestBanStateRetriesRefused(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	table := newFakeBanTable(2, netip.MustParsePrefix("192.0.2.0/24"))
	s := newBanState()
	full := []crowdsec.Decision{
		decision(1, "203.0.113.0/24", time.Hour),
		decision(2, "192.0.2.128/25", time.Hour), // allowed
		decision(3, "198.51.100.1/32", time.Hour),
		decision(4, "198.51.100.2/32", time.Hour), // over max
	}
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: full}, now))
	require.Equal(t, Counts{Added: 2, Refused: 2}, s.counts)
	require.False(t, s.RetryDue(), "no room came back yet")

	require.NoError(t, s.Apply(table, crowdsec.Delta{Deleted: full[:1]}, now))
	require.True(t, s.RetryDue(), "a slot freed")
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: full[1:]}, now))
	require.Contains(t, table.bans, netip.MustParsePrefix("198.51.100.2/32"), "the decision refused over max is in force")
	require.Equal(t, Counts{Added: 3, Removed: 1, Refused: 3}, s.counts, "the allowed one refused again")
	require.False(t, s.RetryDue())

	// An allowed prefix added then removed lifted 198.51.100.1 behind the state's back.
	delete(table.bans, netip.MustParsePrefix("198.51.100.1/32"))
	table.allow, table.max = nil, 3
	require.NoError(t, s.Apply(table, crowdsec.Delta{Startup: true, New: full[1:]}, now))
	require.Equal(t, map[netip.Prefix]time.Time{
		netip.MustParsePrefix("192.0.2.128/25"):  now.Add(time.Hour),
		netip.MustParsePrefix("198.51.100.1/32"): now.Add(time.Hour),
		netip.MustParsePrefix("198.51.100.2/32"): now.Add(time.Hour),
	}, table.bans, "the one lifted banned again, the one allowed before banned")
	require.Equal(t, Counts{Added: 5, Removed: 1, Refused: 3}, s.counts)
}
