//go:build linux

package bpf

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBanMapMemoryBound: the ban maps' memory -check states before
// loading (BanMapMemory) bounds what the kernel accounts for them once
// loaded, and is within 15% of it.
func TestBanMapMemoryBound(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, max := range []int{1, 0, 200_000} {
		in := NewInstance(Policy{Bans: BansConfig{On: true, Max: max}})
		table, err := in.Bans()
		require.NoError(t, err)
		got, err := table.Memory()
		require.NoError(t, err)
		stated := BanMapMemory(max)
		require.LessOrEqual(t, got, stated, "max %d", max)
		require.Greater(t, float64(got), 0.85*float64(stated), "max %d: stated %d, measured %d", max, stated, got)
		require.NoError(t, in.Close())
	}
}
