//go:build linux

package bans

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// retrySpacing is the least time between full pulls made to retry the
// decisions refused for want of room: one a minute at most, whatever
// the churn of a full table.
const retrySpacing = time.Minute

// fullPullDue says whether the next pull must be a full one: the allowed
// prefixes changed, or room came back for decisions refused over max.
func (b *Bans) fullPullDue() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resync || b.state.RetryDue() && time.Since(b.lastFull) >= retrySpacing
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
	if err := b.state.Apply(b.tableLocked(), d, time.Now()); err != nil {
		b.failed(report, fmt.Errorf("bans: %w", err))
		return false
	}
	b.noteIPRanges(d)
	b.state.Synced(time.Now())
	if startup {
		b.resync, b.lastFull = false, time.Now()
	}
	b.recovered()
	return true
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
