//go:build linux

package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBanLimitHandedOver: a limit claim crosses a handover with the drop
// claim over it: the successor's table lists its rate, its programs drop
// all while the drop claim holds, and once the successor lifts that, they
// limit the prefix at the rate the stopping instance set.
func TestBanLimitHandedOver(t *testing.T) {
	testns.RequirePrivileged(t)
	limitFakeClock = true
	defer func() { limitFakeClock = false }()
	policy := Policy{Bans: BansConfig{On: true}}
	old := NewInstance(policy)
	defer old.Close()
	p, err := old.loadFresh()
	require.NoError(t, err)
	defer p.Close()
	table, err := old.Bans()
	require.NoError(t, err)
	base := monoClock()
	require.NoError(t, table.setClock(base))
	prefix := netip.MustParsePrefix("198.51.100.0/24")
	limitEnd, feedEnd := time.Now().Add(2*time.Hour), time.Now().Add(time.Hour)
	o, err := table.Limit(prefix, limitEnd, BanOriginDetect, 100)
	require.NoError(t, err)
	require.Equal(t, BanAdded, o)
	o, err = table.Ban(prefix, feedEnd, BanOriginCrowdSec)
	require.NoError(t, err)
	require.Equal(t, BanAdded, o)

	in := NewInstance(policy)
	defer in.Close()
	adopted, why := in.AdoptRules(handOffAll(t, old, banMapCount))
	require.True(t, adopted, why)
	q, err := in.loadFresh()
	require.NoError(t, err)
	defer q.Close()
	mine, err := in.Bans()
	require.NoError(t, err)
	got := mine.Entries()
	require.Len(t, got, 2)
	require.Equal(t, BanEntry{Prefix: prefix, End: got[0].End, Origin: BanOriginCrowdSec}, got[0])
	require.WithinDuration(t, feedEnd, got[0].End, time.Millisecond)
	require.Equal(t, BanEntry{Prefix: prefix, End: got[1].End, Origin: BanOriginDetect, LimitPPS: 100}, got[1])
	require.WithinDuration(t, limitEnd, got[1].End, time.Millisecond)

	frame := banFrame("198.51.100.5")
	require.Zero(t, passed(t, q, frame, 10), "the feed's drop claim holds after the handover")
	ok, err := mine.Lift(prefix, BanOriginCrowdSec)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, mine.setClock(base+uint64(time.Second)))
	require.Equal(t, 10, passed(t, q, frame, 25), "limited at 100 a second, a burst of 10")
	c, err := q.BanCounters()
	require.NoError(t, err)
	require.Equal(t, uint64(10), c[BanOriginCrowdSec][BanDrop].Packets)
	require.Equal(t, uint64(15), c[BanOriginDetect][BanDrop].Packets)
}
