//go:build linux

package bpf

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestMemlockWithoutCapSysResource: where lifting RLIMIT_MEMLOCK is refused
// (a kernel before 5.11 and no CAP_SYS_RESOURCE, which the package does not
// grant and root may lack), the load goes on with the soft limit raised to
// the hard one, which needs no capability, and a refused map names it.
func TestMemlockWithoutCapSysResource(t *testing.T) {
	var orig unix.Rlimit
	require.NoError(t, unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &orig))
	if orig.Max == 0 {
		t.Skip("hard RLIMIT_MEMLOCK is 0: no soft limit below it to raise")
	}
	t.Cleanup(func() {
		memlockHard.Store(0)
		require.NoError(t, unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &orig, nil))
	})
	// Lowering the soft limit needs no capability, nor does restoring it.
	require.NoError(t, unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 0, Max: orig.Max}, nil))
	refused := func() error { return fmt.Errorf("failed to set memlock rlimit: %w", unix.EPERM) }
	require.NoError(t, raiseMemlock(refused))
	var now unix.Rlimit
	require.NoError(t, unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &now))
	require.Equal(t, orig.Max, now.Cur, "the soft limit is the hard one")
	require.Equal(t, orig.Max, now.Max)
	err := loadError(fmt.Errorf("map create: %w", unix.EPERM))
	require.ErrorIs(t, err, ErrPermission)
	if orig.Max != unix.RLIM_INFINITY {
		require.ErrorContains(t, err, fmt.Sprintf("it stays at the hard limit, %d bytes; raise the hard limit of the process that starts the binary (systemd: LimitMEMLOCK=infinity)", orig.Max))
	}

	require.NoError(t, raiseMemlock(func() error { return nil }), "lifted, or charged to the memory cgroup")
	other := fmt.Errorf("unexpected error detecting memory cgroup accounting")
	require.ErrorIs(t, raiseMemlock(func() error { return other }), other)
}
