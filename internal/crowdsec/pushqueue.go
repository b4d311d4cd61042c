package crowdsec

import (
	"context"
	"sync"
	"time"
)

// PushStats are a PushQueue's counts since it was made.
type PushStats struct {
	Pushed  int64  // bans the LAPI took
	Failed  int64  // posts that failed (each retry counts)
	Dropped int64  // bans given up: the queue was full, or the ban ended before the LAPI took it
	Error   string // the last failure; "" after a success
}

// PushQueue shares bans in the background: Offer never waits, and a
// failed post is retried with Backoff until the LAPI takes it or the ban
// has ended. At most its size bans wait (about 200 bytes each).
type PushQueue struct {
	p       *Pusher
	ch      chan Ban
	backoff Backoff

	mu    sync.Mutex
	stats PushStats
}

// NewPushQueue queues up to size bans for p; retries wait from min to max.
func NewPushQueue(p *Pusher, size int, min, max time.Duration) *PushQueue {
	return &PushQueue{p: p, ch: make(chan Ban, size), backoff: Backoff{Min: min, Max: max}}
}

// Offer queues b; false (and counted dropped) when the queue is full.
func (q *PushQueue) Offer(b Ban) bool {
	select {
	case q.ch <- b:
		return true
	default:
		q.mu.Lock()
		q.stats.Dropped++
		q.mu.Unlock()
		return false
	}
}

// Len is how many bans wait to be posted.
func (q *PushQueue) Len() int { return len(q.ch) }

// Stats are the counts now.
func (q *PushQueue) Stats() PushStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// Run posts the queued bans, in order, until ctx ends.
func (q *PushQueue) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-q.ch:
			if !q.push(ctx, b) {
				return
			}
		}
	}
}

// push posts b until the LAPI takes it, b ends, or ctx does (false).
func (q *PushQueue) push(ctx context.Context, b Ban) bool {
	for {
		if !time.Now().Before(b.Start.Add(b.Duration)) {
			q.count(func(s *PushStats) { s.Dropped++ })
			return true
		}
		_, err := q.p.Push(ctx, b)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			q.backoff.Reset()
			q.count(func(s *PushStats) { s.Pushed++; s.Error = "" })
			return true
		}
		q.count(func(s *PushStats) { s.Failed++; s.Error = err.Error() })
		wait := time.NewTimer(q.backoff.Next())
		select {
		case <-ctx.Done():
			wait.Stop()
			return false
		case <-wait.C:
		}
	}
}

func (q *PushQueue) count(f func(*PushStats)) {
	q.mu.Lock()
	f(&q.stats)
	q.mu.Unlock()
}
