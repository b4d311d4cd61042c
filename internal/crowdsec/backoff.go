package crowdsec

import (
	"math/rand/v2"
	"time"
)

// Backoff computes waits between failed pulls: exponential from Min,
// doubled per failure up to Max, with up to a fifth of jitter taken off so
// a fleet restarted together spreads its retries.
type Backoff struct {
	// Min is the first wait; 0 means 1s.
	Min time.Duration
	// Max caps the wait; 0 means 5m.
	Max time.Duration
	// Rand returns a float in [0,1); nil means math/rand/v2.Float64. Tests set it.
	Rand func() float64

	failures int
}

// Next returns the wait before the next try and counts one more failure.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 5 * time.Minute
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 0; i < b.failures && d < hi; i++ {
		d *= 2
	}
	if d > hi {
		d = hi
	}
	b.failures++
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	return d - time.Duration(float64(d)/5*r())
}

// Reset forgets the failures: the next wait is Min again.
func (b *Backoff) Reset() { b.failures = 0 }
