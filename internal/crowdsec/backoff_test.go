package crowdsec

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoff checks the waits double from Min, stop at Max, lose at most a fifth to jitter, and Reset restarts them.
func TestBackoff(t *testing.T) {
	r := 0.0
	b := Backoff{Min: time.Second, Max: 10 * time.Second, Rand: func() float64 { return r }}
	var got []time.Duration
	for i := 0; i < 6; i++ {
		got = append(got, b.Next())
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, got)

	r = 0.5
	require.Equal(t, 9*time.Second, b.Next())
	b.Reset()
	require.Equal(t, 900*time.Millisecond, b.Next())

	var zero Backoff
	zero.Rand = func() float64 { return 0 }
	require.Equal(t, time.Second, zero.Next())
	for i := 0; i < 100; i++ {
		zero.Next()
	}
	require.Equal(t, 5*time.Minute, zero.Next(), "the default cap, after many failures")

	real := Backoff{Min: time.Second, Max: time.Second}
	for i := 0; i < 100; i++ {
		d := real.Next()
		require.True(t, d > 800*time.Millisecond && d <= time.Second, "wait %s outside (0.8s, 1s]", d)
	}
}
