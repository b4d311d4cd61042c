//go:build linux

package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBanHistoryHandedOver: the ban history goes to the successor after
// the ban maps, with the rule maps too; what it lists is what was
// remembered (IPv4 and IPv6, counts, durations, ends), less the sources
// past their end by more than the max age; with the bans refused it is
// not kept.
func TestBanHistoryHandedOver(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, withRules := range []bool{false, true} {
		policy := Policy{Bans: BansConfig{On: true}}
		want := banMapCount + 1
		if withRules {
			policy = handedPolicy("")
			policy.Bans = BansConfig{On: true}
			want += ruleMapCount
		}
		old := NewInstance(policy)
		defer old.Close()
		p, err := old.loadFresh() // lays the rule maps out
		require.NoError(t, err)
		defer p.Close()
		table, err := old.Bans()
		require.NoError(t, err)
		now := time.Now()
		// The history keeps the kernel's clock, which starts at boot: an
		// end before boot reads as boot, so every age here stays within
		// the machine's uptime (a CI machine may have booted minutes ago).
		maxAge := min(time.Hour, time.Duration(monoClock())/2)
		kept := []BanRecord{
			{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Count: 2, Duration: 20 * time.Minute, End: now.Add(-maxAge / 2)},
			{Prefix: netip.MustParsePrefix("2001:db8::/48"), Count: 5, Duration: time.Hour, End: now.Add(30 * time.Minute)},
		}
		stale := BanRecord{Prefix: netip.MustParsePrefix("203.0.113.9/32"), Count: 1, Duration: time.Minute, End: now.Add(-maxAge - maxAge/2)}
		for _, r := range append(kept, stale) {
			require.NoError(t, table.Remember(r, maxAge))
		}

		succ := NewInstance(policy)
		defer succ.Close()
		adopted, why := succ.AdoptRules(handOffAll(t, old, want))
		require.True(t, adopted, why)
		got, err := succ.Bans()
		require.NoError(t, err)
		hist, err := got.History(maxAge)
		require.NoError(t, err)
		require.Len(t, hist, len(kept), "the stale source is dropped")
		for _, r := range kept {
			i := indexOf(hist, r.Prefix)
			require.GreaterOrEqual(t, i, 0, "%s handed over", r.Prefix)
			require.Equal(t, r.Count, hist[i].Count)
			require.Equal(t, r.Duration, hist[i].Duration)
			require.InDelta(t, 0, hist[i].End.Sub(r.End).Seconds(), 0.01)
		}

		// Another max: the bans are refused, and the history with them.
		other := policy
		other.Bans.Max = 7
		cold := NewInstance(other)
		defer cold.Close()
		adopted, _ = cold.AdoptRules(handOffAll(t, old, want))
		require.Equal(t, withRules, adopted, "the rules alone")
		coldTable, err := cold.Bans()
		require.NoError(t, err)
		hist, err = coldTable.History(maxAge)
		require.NoError(t, err)
		require.Empty(t, hist, "a cold start loses the history")
	}
}

// TestBanHistoryBounded: a full history makes room for a new source (the
// stale first), never holds more than BanHistoryMax, and its kernel memory
// full is what banHistorySpec says.
func TestBanHistoryBounded(t *testing.T) {
	testns.RequirePrivileged(t)
	in := NewInstance(Policy{Bans: BansConfig{On: true}})
	defer in.Close()
	table, err := in.Bans()
	require.NoError(t, err)
	now := time.Now()
	maxAge := min(time.Hour, time.Duration(monoClock())/2) // within the uptime, as above
	for i := range BanHistoryMax {
		end := now
		if i < 10 {
			end = now.Add(-maxAge - maxAge/2) // stale
		}
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		require.NoError(t, table.Remember(BanRecord{Prefix: p, Count: 1, Duration: time.Minute, End: end}, maxAge))
	}
	mem, err := mapMemory(table.history)
	require.NoError(t, err)
	t.Logf("ban history of %d sources: %d bytes of kernel memory", BanHistoryMax, mem)
	require.LessOrEqual(t, mem, uint64(BanHistoryMax*120+4096), "120 bytes a source")
	fresh := BanRecord{Prefix: netip.MustParsePrefix("2001:db8::1/128"), Count: 3, Duration: time.Minute, End: now}
	require.NoError(t, table.Remember(fresh, maxAge), "a full history makes room")
	hist, err := table.History(maxAge)
	require.NoError(t, err)
	require.GreaterOrEqual(t, indexOf(hist, fresh.Prefix), 0)
	require.Len(t, hist, BanHistoryMax-BanHistoryMax/8+1, "the stale and others, an eighth in all, made room")
}

func indexOf(rs []BanRecord, p netip.Prefix) int {
	for i, r := range rs {
		if r.Prefix == p {
			return i
		}
	}
	return -1
}
