//go:build linux

package bans

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// retrySpacing is the least time between full pulls made to retry the
// decisions refused for want of room: one a minute at most, whatever
// the churn of a full table.
const retrySpacing = time.Minute

// resyncJitter is the most a periodic full pull comes early, as a share
// of Feed.Resync: a fleet started together does not pull in step.
const resyncJitter = 0.1

// fullPullDue says whether the next pull must be a full one: the allowed
// prefixes changed, room came back for decisions refused over max, or the
// periodic resync is due.
func (b *Bans) fullPullDue() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resync || b.retryDue() || b.resyncDue(time.Now())
}

// retryDue says whether room came back for decisions refused over max, a
// minute or more after the last full pull.
func (b *Bans) retryDue() bool {
	return b.state.RetryDue() && time.Since(b.lastFull) >= retrySpacing
}

// periodicOnly says whether a full pull at now is the periodic one alone:
// not the first, nor one after a failure, a change of the allowed
// prefixes or room come back.
func (b *Bans) periodicOnly(now time.Time) bool {
	return b.resyncDue(now) && !b.resync && b.reported == "" && !b.retryDue()
}

// resyncDue says whether the periodic full pull is due at now.
func (b *Bans) resyncDue(now time.Time) bool {
	return b.set.Feed != nil && b.set.Feed.Resync > 0 && !b.resyncAt.IsZero() && !now.Before(b.resyncAt)
}

// nextResync is when the periodic full pull after one made at now is due:
// Feed.Resync later, less up to a tenth of it.
func (b *Bans) nextResync(now time.Time) time.Time {
	r := b.set.Feed.Resync
	if r <= 0 {
		return time.Time{}
	}
	return now.Add(r - time.Duration(rand.Float64()*resyncJitter*float64(r)))
}

// poll pulls the feed every interval (startup at first and after any
// failure, which waits out a backoff) and sweeps the expired bans at
// every tick, until ctx ends.
func (b *Bans) poll(ctx context.Context, report Errors) {
	defer close(b.done)
	interval := b.set.Feed.Interval
	backoff := crowdsec.Backoff{Min: min(time.Second, interval), Max: 5 * time.Minute}
	startup := true
	next := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if now := time.Now(); !now.Before(next) {
			if b.pull(ctx, report, startup || b.fullPullDue()) {
				startup = false
				backoff.Reset()
				next = now.Add(interval)
			} else if ctx.Err() == nil {
				startup = true
				next = now.Add(backoff.Next())
			}
		}
		b.sweep(report)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pull asks the feed once and puts the answer in force; false when it failed.
func (b *Bans) pull(ctx context.Context, report Errors, startup bool) bool {
	timeout := max(b.set.Feed.Interval, 30*time.Second)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	d, err := b.feed.Pull(pctx, startup)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			b.failed(report, fmt.Errorf("bans: crowdsec: %w; the bans in force stay until they expire, retrying with a full resync", err))
		}
		return false
	}
	periodic := startup && b.periodicOnly(time.Now())
	before := b.state.Counts()
	if err := b.state.Apply(b.tableLocked(), d, time.Now()); err != nil {
		b.failed(report, fmt.Errorf("bans: %w", err))
		return false
	}
	b.noteIPRanges(d)
	b.state.Synced(time.Now())
	if periodic {
		b.noteResync(before, b.state.Counts())
	}
	if startup {
		now := time.Now()
		b.resync, b.lastFull, b.resyncAt = false, now, b.nextResync(now)
	}
	b.recovered()
	return true
}

// noteResync logs what a periodic full pull changed: decisions the delta
// stream never brought, bans it never lifted. Nothing when nothing changed.
func (b *Bans) noteResync(before, after Counts) {
	added, removed := after.Added-before.Added, after.Removed-before.Removed
	if added == 0 && removed == 0 {
		return
	}
	b.log.Infof("bans: crowdsec: the periodic full pull (resync = %s) found what the LAPI's deltas had missed: banned %s, lifted %s (the LAPI can miss a decision made while it answers a pull)",
		b.set.Feed.Resync, plural(added, "prefix", "prefixes"), plural(removed, "ban", "bans"))
}

// plural says n things, in thousands.
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return quote.Thousands(uint64(n)) + " " + many
}

// noteIPRanges says once, in one line for a whole pull, that decisions of
// scope Ip on a range are enforced as that range: cscli decisions import
// (1.4) gives every row of a list its --scope, default Ip.
func (b *Bans) noteIPRanges(d crowdsec.Delta) {
	if b.ipRangesNoted {
		return
	}
	n, first := 0, ""
	for _, dec := range d.New {
		if strings.EqualFold(dec.Scope, "ip") && dec.Prefix.Bits() < dec.Prefix.Addr().BitLen() {
			if n == 0 {
				first = dec.Value
			}
			n++
		}
	}
	if n == 0 {
		return
	}
	b.ipRangesNoted = true
	b.log.Infof("bans: crowdsec: %s decisions of scope Ip hold a range (such as %s), banned as the ranges they name: 'cscli decisions import' gives every row its --scope, Ip unless told; said once",
		quote.Thousands(uint64(n)), quote.Value(first))
}

// sweep removes the feed's bans past their end from the table.
func (b *Bans) sweep(report Errors) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.state.Expire(b.tableLocked(), time.Now()); err != nil {
		b.failed(report, fmt.Errorf("bans: %w", err))
	}
}

// failed records err for the points and reports it once per change.
func (b *Bans) failed(report Errors, err error) {
	msg := firstLine(err)
	b.state.Failed(msg)
	if msg != b.reported {
		b.reported = msg
		report.AddError(err)
	}
}

// recovered clears the error after a good pull, and says so once.
func (b *Bans) recovered() {
	if b.reported != "" {
		b.log.Infof("bans: crowdsec: synced again")
	}
	b.state.Failed("")
	b.reported = ""
}

// tableLocked is the ban table the decisions go on; nil before one loads.
func (b *Bans) tableLocked() Table {
	if b.table == nil {
		return nil
	}
	return b.table
}
