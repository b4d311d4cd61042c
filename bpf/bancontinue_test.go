//go:build linux

package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestContinueBans: the instance of the next generation of prefix files
// goes on with the bans of the one before, which may then be closed: the
// bans stay in force in the same maps, and new ones are written to them.
func TestContinueBans(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := Policy{DropAll: true, Bans: BansConfig{On: true, Max: 16}}
	before := NewInstance(policy)
	table, err := before.Bans()
	require.NoError(t, err)
	banned := netip.MustParsePrefix("203.0.113.0/24")
	end := time.Now().Add(time.Hour)
	got, err := table.Ban(banned, end, BanOriginCrowdSec)
	require.NoError(t, err)
	require.Equal(t, BanAdded, got)

	next := NewInstance(policy)
	next.ContinueBans(before)
	require.NoError(t, before.Close())
	cont, err := next.Bans()
	require.NoError(t, err)
	entries := cont.Entries()
	require.Len(t, entries, 1)
	require.Equal(t, banned, entries[0].Prefix)
	got, err = cont.Ban(netip.MustParsePrefix("2001:db8::/48"), end, BanOriginCrowdSec)
	require.NoError(t, err, "the maps stay open after the instance before is closed")
	require.Equal(t, BanAdded, got)
	v4, v6 := cont.InForce()
	require.Equal(t, [2]int{1, 1}, [2]int{v4, v6})
	require.NoError(t, next.Close())
}
