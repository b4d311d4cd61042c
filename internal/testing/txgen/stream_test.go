//go:build linux

package txgen_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestStreamFailsAtOnce: a waiter learns of a sender's error as soon as it
// happens, not when its wait runs out; Stop returns the same error.
func TestStreamFailsAtOnce(t *testing.T) {
	refused := errors.New("refused")
	var rounds atomic.Int64
	s := txgen.NewStream(2, func() (int, error) {
		if rounds.Add(1) > 10 {
			return 0, refused
		}
		return 64, nil
	})
	done := make(chan error, 1)
	go func() { done <- s.WaitSent(1<<40, time.Hour) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, refused)
	case <-time.After(time.Minute):
		t.Fatal("WaitSent kept waiting after the stream failed")
	}
	require.ErrorIs(t, s.Stop(), refused)
	require.LessOrEqual(t, s.Sent(), int64(10*64))
}

// TestStreamCounts: what rounds return adds up, and Stop ends the senders.
func TestStreamCounts(t *testing.T) {
	s := txgen.NewStream(3, func() (int, error) { time.Sleep(time.Microsecond); return 5, nil })
	require.NoError(t, s.WaitSent(500, time.Minute))
	require.NoError(t, s.Stop())
	n := s.Sent()
	require.GreaterOrEqual(t, n, int64(500))
	require.Zero(t, n%5)
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, n, s.Sent(), "nothing sent after Stop")
}
