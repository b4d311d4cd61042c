//go:build linux

package bpf

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestTakeOverForeignClosesEachDescriptorOnce: descriptors that are not BPF
// objects are closed once each. A second close would hit whatever another
// goroutine opened under the freed number meanwhile: here, a file a
// goroutine holds open while takeOver runs over and over. None is left open.
func TestTakeOverForeignClosesEachDescriptorOnce(t *testing.T) {
	var devNull unix.Stat_t
	require.NoError(t, unix.Stat("/dev/null", &devNull))
	open := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(entries)
	}
	before := open()
	var stop, lost atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		for !stop.Load() {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			for range 50 {
				var st unix.Stat_t
				if unix.Fstat(fd, &st) != nil || st.Ino != devNull.Ino || st.Rdev != devNull.Rdev {
					lost.Store(true)
					return // fd is no longer ours: do not close it
				}
			}
			unix.Close(fd)
		}
	}()
	for i := 0; i < 20000 && !lost.Load(); i++ {
		var fds [3]int
		for j := range fds {
			fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
			require.NoError(t, err)
			fds[j] = fd
		}
		// takeOver, not Acquire: a refused handover would go on to attach
		// afresh, and interface 1 here is the host's loopback.
		_, _, err := NewInstance(Policy{DropAll: true}).takeOver(Want{Ifindex: 1, Mode: ModeNative}, HandedFrom(fds[:]), &Got{})
		var foreign *ForeignError
		require.True(t, errors.As(err, &foreign), "err = %v", err)
	}
	stop.Store(true)
	<-done
	require.False(t, lost.Load(), "takeOver closed a descriptor another goroutine had opened under a number it had already given up")
	require.Equal(t, before, open(), "every foreign descriptor is closed")
}
