//go:build linux

package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBansInForceByClaim: a view counts each origin's claims in force, read
// from the maps alone: a prefix two origins ban counts for both, and one
// origin's lift leaves the other's.
func TestBansInForceByClaim(t *testing.T) {
	testns.RequirePrivileged(t)
	in := NewInstance(Policy{Bans: BansConfig{On: true}})
	defer in.Close()
	p, err := in.loadFresh()
	require.NoError(t, err)
	defer p.Close()
	table, err := in.Bans()
	require.NoError(t, err)
	both, one := netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/48")
	end := time.Now().Add(time.Hour)
	for _, b := range []struct {
		p      netip.Prefix
		origin uint8
	}{{both, BanOriginCrowdSec}, {both, BanOriginDetect}, {one, BanOriginDetect}} {
		_, err := table.Ban(b.p, end, b.origin)
		require.NoError(t, err)
	}
	got, err := p.BansInForce()
	require.NoError(t, err)
	require.Equal(t, 1, got[BanOriginCrowdSec])
	require.Equal(t, 2, got[BanOriginDetect])

	lifted, err := table.Lift(both, BanOriginDetect)
	require.NoError(t, err)
	require.True(t, lifted)
	got, err = p.BansInForce()
	require.NoError(t, err)
	require.Equal(t, 1, got[BanOriginCrowdSec], "the feed's claim stays")
	require.Equal(t, 1, got[BanOriginDetect])
}
