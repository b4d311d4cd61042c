package crowdsec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// BudgetWindow is the window of the push budget: at most PerMinute posts
// of new bans begin in any BudgetWindow.
const BudgetWindow = time.Minute

// RefusedTries is how many posts of a ban the LAPI refuses (an
// AlertError that is Refused) before the queue gives the ban up.
const RefusedTries = 3

// ErrPushBudget is wrapped by the reason of a ban not pushed because the
// push budget was spent.
var ErrPushBudget = errors.New("the push budget is spent: max_pushes_per_minute posts of new bans began in the last 60 s; the ban stays local")

// ErrBanEnded is wrapped by the reason of a ban that ended before the
// LAPI took it.
var ErrBanEnded = errors.New("the ban ended before the LAPI took it")

// PushStats are a PushQueue's counts since it was made. Every ban Offer
// was given is, at any time, one of Pushed, Dropped or Waiting.
type PushStats struct {
	Pushed int64 // bans the LAPI took
	Failed int64 // posts that failed (each retry counts)
	// Dropped are the bans that will not be pushed: the queue was full
	// (Offer returned false), or GivenUp, or OverBudget.
	Dropped int64
	// GivenUp are the bans dropped after posts: refused RefusedTries
	// times, or ended while retried (or before their first post).
	GivenUp int64
	// OverBudget are the bans dropped unposted: the budget was spent.
	OverBudget int64
	Waiting    int64  // bans in the queue now, parked ones included
	Error      string // the last failure; "" after a success
}

// PushQueueConfig configures a PushQueue.
type PushQueueConfig struct {
	// Size bounds the bans that wait, parked ones included; must be > 0.
	Size int
	// MinRetry and MaxRetry bound each ban's Backoff (0: Backoff's).
	MinRetry, MaxRetry time.Duration
	// PerMinute is the push budget: at most that many posts of new bans
	// begin in any BudgetWindow (a ban's retries are not counted again);
	// must be > 0.
	PerMinute int
	// Spent are the times of posts begun before, e.g. a predecessor's
	// Spent() handed over on a reload; those older than BudgetWindow are
	// ignored.
	Spent []time.Time
	// OnGiveUp, if set, is called once for each ban Offer took and the
	// queue drops (GivenUp or OverBudget), with why: an error wrapping
	// ErrPushBudget, ErrBanEnded or the last post's error (an
	// *AlertError for a refusal). It is called by Run's goroutine, with
	// no lock of the queue held, and delays the next post while it runs.
	OnGiveUp func(Ban, error)
	// Now is the queue's clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// PushQueue shares bans in the background: Offer never waits, and Run
// posts whatever is due, oldest first, so a ban the LAPI refuses never
// holds back another. A failed post parks its ban with its own Backoff;
// a ban the LAPI refuses (AlertError.Refused) is given up after
// RefusedTries posts, any other failure is retried until the ban ends.
// A failure that is not the LAPI's answer to the alert (the LAPI
// unreachable, the login failing) also holds every post for a shared
// backoff, so a LAPI that is down sees one post at a time.
//
// At most Size bans wait, parked ones included (each under 1 KiB, the
// ban with its evidence); past that Offer drops the new ban and counts
// it, unreported (Offer's false says so). A ban beyond the push budget
// is dropped when its first post would begin. The bans still waiting
// when Run returns stay queued for the next Run.
type PushQueue struct {
	p        *Pusher
	cfg      PushQueueConfig
	now      func() time.Time
	wake     chan struct{}
	lapiDown Backoff // the shared hold after a failure not about the alert

	mu      sync.Mutex
	waiting []*pending // in the order offered
	spent   []time.Time
	holdTo  time.Time // no post begins before it
	stats   PushStats
}

// pending is one ban waiting: due for a post at due, after tries posts.
type pending struct {
	ban     Ban
	due     time.Time
	tries   int
	counted bool // its first post was charged to the budget
	backoff Backoff
	err     error // the last post's
}

// dropped is a ban given up and why, for OnGiveUp.
type dropped struct {
	ban Ban
	why error
}

// NewPushQueue makes a queue of bans for p.
func NewPushQueue(p *Pusher, cfg PushQueueConfig) (*PushQueue, error) {
	if cfg.Size <= 0 {
		return nil, fmt.Errorf("crowdsec push queue: size %d: must be at least 1", cfg.Size)
	}
	if cfg.PerMinute <= 0 {
		return nil, fmt.Errorf("max_pushes_per_minute %d: must be at least 1 (the push budget is always on)", cfg.PerMinute)
	}
	q := &PushQueue{
		p: p, cfg: cfg, now: cfg.Now, wake: make(chan struct{}, 1),
		lapiDown: Backoff{Min: cfg.MinRetry, Max: cfg.MaxRetry},
	}
	if q.now == nil {
		q.now = time.Now
	}
	now := q.now()
	for _, t := range cfg.Spent {
		if t.After(now) {
			t = now // a clock that stepped back: counted as just spent
		}
		if now.Sub(t) < BudgetWindow {
			q.spent = append(q.spent, t)
		}
	}
	sort.Slice(q.spent, func(i, j int) bool { return q.spent[i].Before(q.spent[j]) })
	if n := len(q.spent); n > cfg.PerMinute {
		q.spent = q.spent[n-cfg.PerMinute:] // the newest decide when room comes back
	}
	return q, nil
}

// Offer queues b; false (and counted dropped) when the queue is full.
func (q *PushQueue) Offer(b Ban) bool {
	q.mu.Lock()
	if len(q.waiting) >= q.cfg.Size {
		q.stats.Dropped++
		q.mu.Unlock()
		return false
	}
	q.waiting = append(q.waiting, &pending{ban: b, backoff: Backoff{Min: q.cfg.MinRetry, Max: q.cfg.MaxRetry}})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// Stats are the counts now.
func (q *PushQueue) Stats() PushStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Waiting = int64(len(q.waiting))
	return s
}

// Spent are the times of the posts of new bans begun in the last
// BudgetWindow, oldest first: what a successor's PushQueueConfig.Spent
// takes over.
func (q *PushQueue) Spent() []time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.forget(q.now())
	return append([]time.Time(nil), q.spent...)
}

// Run posts the bans as they fall due until ctx ends.
func (q *PushQueue) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p, wait, gone := q.next()
		q.report(gone)
		if p != nil {
			q.post(ctx, p)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		var tick <-chan time.Time // nil: nothing waits but a new ban
		if wait > 0 {
			timer.Reset(wait) // since Go 1.23 no stale tick survives Reset or Stop
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-tick:
		}
		timer.Stop()
	}
}

// next drops the bans that ended or are over budget and returns the
// oldest due for a post, or else how long until one may be (0: none
// waits).
func (q *PushQueue) next() (*pending, time.Duration, []dropped) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	var gone []dropped
	var due *pending
	var soon time.Time
	kept := q.waiting[:0]
	for _, p := range q.waiting {
		end := p.ban.Start.Add(p.ban.Duration)
		if !now.Before(end) {
			why := error(ErrBanEnded)
			if p.err != nil {
				why = fmt.Errorf("%w, after %d posts: %w", ErrBanEnded, p.tries, p.err)
			}
			gone = append(gone, dropped{p.ban, why})
			q.stats.GivenUp++
			q.stats.Dropped++
			continue
		}
		if due == nil && !now.Before(p.due) && !now.Before(q.holdTo) {
			if !p.counted && !q.charge(now) {
				gone = append(gone, dropped{p.ban, ErrPushBudget})
				q.stats.OverBudget++
				q.stats.Dropped++
				continue
			}
			p.counted = true
			due = p
		}
		kept = append(kept, p)
		at := p.due
		if at.Before(q.holdTo) {
			at = q.holdTo
		}
		if end.Before(at) {
			at = end
		}
		if soon.IsZero() || at.Before(soon) {
			soon = at
		}
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
	if due != nil || soon.IsZero() {
		return due, 0, gone
	}
	return nil, max(soon.Sub(now), time.Millisecond), gone
}

// charge counts a post of a new ban begun at now; false when the budget
// is spent.
func (q *PushQueue) charge(now time.Time) bool {
	q.forget(now)
	if len(q.spent) >= q.cfg.PerMinute {
		return false
	}
	q.spent = append(q.spent, now)
	return true
}

// forget drops the spent times that have left the window at now.
func (q *PushQueue) forget(now time.Time) {
	i := 0
	for i < len(q.spent) && now.Sub(q.spent[i]) >= BudgetWindow {
		i++
	}
	q.spent = append(q.spent[:0], q.spent[i:]...)
}

// post posts p once and settles it: taken, parked or given up. A post
// ctx cut short is not counted; p stays as it was.
func (q *PushQueue) post(ctx context.Context, p *pending) {
	_, err := q.p.Push(ctx, p.ban)
	if ctx.Err() != nil {
		return
	}
	q.mu.Lock()
	now := q.now()
	if err == nil {
		q.remove(p)
		q.lapiDown.Reset()
		q.holdTo = time.Time{}
		q.stats.Pushed++
		q.stats.Error = ""
		q.mu.Unlock()
		return
	}
	p.tries++
	p.err = err
	q.stats.Failed++
	q.stats.Error = err.Error()
	var ae *AlertError
	if errors.As(err, &ae) && ae.Refused() && p.tries >= RefusedTries {
		q.remove(p)
		q.stats.GivenUp++
		q.stats.Dropped++
		q.mu.Unlock()
		q.report([]dropped{{p.ban, fmt.Errorf("refused %d times: %w", p.tries, err)}})
		return
	}
	p.due = now.Add(p.backoff.Next())
	if ae == nil {
		q.holdTo = now.Add(q.lapiDown.Next())
	}
	q.mu.Unlock()
}

// remove takes p out of the waiting bans.
func (q *PushQueue) remove(p *pending) {
	if i := slices.Index(q.waiting, p); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
}

func (q *PushQueue) report(gone []dropped) {
	if q.cfg.OnGiveUp == nil {
		return
	}
	for _, d := range gone {
		q.cfg.OnGiveUp(d.ban, d.why)
	}
}
