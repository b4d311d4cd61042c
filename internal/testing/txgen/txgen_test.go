//go:build linux

package txgen_test

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestSendExactUnderSignals: signals aimed at the sending thread while a
// live-frames run is in progress (as a child's SIGCHLD or the Go runtime's
// preemption can be) must not make Send transmit any frame twice.
func TestSendExactUnderSignals(t *testing.T) {
	ns := testns.New(t)
	gen, err := txgen.NewCounting()
	require.NoError(t, err)
	defer gen.Close()
	udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))

	const rounds, per = 20, 2000
	var tid atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	var kicks atomic.Int64
	go func() {
		defer close(done)
		// Bounded, so that a Send that restarts on every signal still ends,
		// and the test reports the frames sent twice instead of hanging.
		for quit := time.After(10 * time.Second); ; {
			select {
			case <-stop:
				return
			case <-quit:
				return
			default:
			}
			if id := tid.Load(); id != 0 && unix.Tgkill(os.Getpid(), int(id), unix.SIGURG) == nil {
				kicks.Add(1)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	err = ns.Do(func() error {
		tid.Store(int64(unix.Gettid()))
		defer tid.Store(0)
		for range rounds {
			if err := gen.Send(ns.PeerIdx, udp, per); err != nil {
				return err
			}
		}
		return nil
	})
	close(stop)
	<-done
	require.NoError(t, err)
	sent, err := gen.Sent()
	require.NoError(t, err)
	t.Logf("%d signals aimed at the sending thread during %d sends of %d frames", kicks.Load(), rounds, per)
	require.Positive(t, kicks.Load(), "no signal reached the sending thread: the test proves nothing")
	require.Equal(t, uint64(rounds*per), sent, "frames transmitted")
}
