//go:build linux

package xdp_drop

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	ibans "github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// banFeed is where decisions come from: the CrowdSec stream client.
type banFeed interface {
	Pull(ctx context.Context, startup bool) (crowdsec.Delta, error)
}

// bans owns the timed bans of the plugin instance: the kernel's ban table
// (shared by every interface's program), the decisions in force, and the
// poller that pulls the feed on its own clock, puts its deltas in force
// and sweeps the bans past their end. Made by Init when [bans] is set.
type bans struct {
	set  *bansSettings
	log  telegraf.Logger
	feed banFeed

	mu       sync.Mutex
	table    *bpf.BanTable
	state    *ibans.Decisions
	reported string // the error last logged; "" when the feed is fine
	// allowReported is the allow_prefix_file error last reported.
	allowReported string
	cancel        context.CancelFunc
	done          chan struct{}
	// started: the poller ran (or runs); a stopped owner starts no more.
	started bool
	// detect owns [bans.detect]; nil without it.
	detect *detection
	// resync: the allowed prefixes changed, so the next pull is a full
	// one, which bans again what they no longer cover; lastFull is when
	// the last full pull was put in force.
	resync   bool
	lastFull time.Time
	// ipRangesNoted: decisions of scope Ip on a range were logged once.
	ipRangesNoted bool
}

// retrySpacing is the least time between full pulls made to retry the
// decisions refused for want of room: one a minute at most, whatever
// the churn of a full table.
const retrySpacing = time.Minute

// fullPullDue says whether the next pull must be a full one: the allowed
// prefixes changed, or room came back for decisions refused over max.
func (b *bans) fullPullDue() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resync || b.state.RetryDue() && time.Since(b.lastFull) >= retrySpacing
}

// newBans makes the bans owner of set, with its CrowdSec client.
func newBans(set *bansSettings, log telegraf.Logger) (*bans, error) {
	var warn func(string, ...any)
	if log != nil {
		warn = log.Warnf
	}
	// The decisions held are bounded at twice max, both families full.
	b := &bans{set: set, log: log, state: ibans.NewDecisions(bpf.BanOriginCrowdSec, 2*set.max, warn)}
	if set.url != "" {
		client, err := crowdsec.New(crowdsec.Config{
			URL: set.url, APIKey: set.apiKey, Types: set.types, TLS: set.tls, UserAgent: set.userAgent(),
			// Both families' bans, beyond max too: those are refused and counted.
			MaxDecisions: max(crowdsec.DefaultMaxDecisions, 2*set.max),
		})
		if err != nil {
			return nil, optionError(keyCrowdSecURL, fmt.Errorf("bans.crowdsec: %w", err))
		}
		b.feed = client
	}
	if set.detect != nil {
		d, err := newDetection(set.detect, set, set.ns, log)
		if err != nil {
			return nil, err
		}
		d.roomBack = b.roomBack
		b.detect = d
	}
	return b, nil
}

// use puts the bans on the ban table of in, the instance whose programs
// are attached now, and starts the poller the first time. A table taken
// over from a predecessor holds its bans: the first full pull keeps those
// the LAPI still has and lifts the others.
func (b *bans) use(acc telegraf.Accumulator, in *bpf.Instance) {
	if b == nil || in == nil {
		return
	}
	table, err := in.Bans()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failed(acc, fmt.Errorf("bans: load the ban maps: %w", err))
		return
	}
	if table != b.table {
		if !b.setAllow(acc, table) {
			return
		}
		b.table = table
	} else {
		b.refreshAllow(acc)
	}
	if b.detect != nil {
		b.detect.use(b.table)
	}
	if b.started || b.feed == nil {
		return
	}
	b.started = true
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go b.poll(ctx, acc)
}

// setAllow puts the allowed prefixes in force in table; bans inside them
// are lifted. False when it failed (reported).
func (b *bans) setAllow(acc telegraf.Accumulator, table *bpf.BanTable) bool {
	allow, err := b.set.allow.union()
	if err == nil {
		// The feed's own bans that the allowed prefixes lifted are its removed.
		before, _ := table.InForceOf(bpf.BanOriginCrowdSec)
		if _, err = table.SetAllow(allow); err == nil {
			after, _ := table.InForceOf(bpf.BanOriginCrowdSec)
			b.state.Lifted(before - after)
		}
	}
	if err == nil && b.detect != nil {
		b.detect.guards.setAllow(allow)
	}
	if err != nil {
		b.failed(acc, fmt.Errorf("bans: set the allowed prefixes: %w", err))
		return false
	}
	return true
}

// refreshAllow puts the allowed prefixes in force again when a file of
// them changed; a file that fails keeps its last good prefixes, and its
// error is reported once.
func (b *bans) refreshAllow(acc telegraf.Accumulator) {
	changed, err := b.set.allow.refresh()
	switch {
	case err != nil && err.Error() != b.allowReported:
		b.allowReported = err.Error()
		acc.AddError(fmt.Errorf("bans: %w; the allowed prefixes read before stay in force", err))
	case err == nil && b.allowReported != "":
		b.allowReported = ""
		b.log.Infof("bans: allow_prefix_file reads again")
	}
	if changed && b.setAllow(acc, b.table) {
		b.resync = true
		b.log.Infof("bans: allowed prefixes changed: %s in force", quote.Thousands(uint64(b.set.allow.count())))
	}
}

// stop ends the poller; the bans stay in the table, for a successor that
// takes the maps over or until the programs go.
func (b *bans) stop() {
	if b == nil {
		return
	}
	if b.detect != nil {
		b.detect.stop()
	}
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel = nil
	b.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// windows is the detection's, for the sampling; nil without one.
func (b *bans) windows() windows {
	if b == nil || b.detect == nil {
		return nil
	}
	return b.detect
}

// takeEvents appends the detection's events of the interval to out.
func (b *bans) takeEvents(out []BanEvent) []BanEvent {
	if b == nil || b.detect == nil {
		return out
	}
	return b.detect.takeEvents(out)
}

// poll pulls the feed every interval (startup at first and after any
// failure, which waits out a backoff) and sweeps the expired bans at
// every tick, until ctx ends.
func (b *bans) poll(ctx context.Context, acc telegraf.Accumulator) {
	defer close(b.done)
	backoff := crowdsec.Backoff{Min: min(time.Second, b.set.interval), Max: 5 * time.Minute}
	startup := true
	next := time.Now()
	tick := time.NewTicker(b.set.interval)
	defer tick.Stop()
	for {
		if now := time.Now(); !now.Before(next) {
			if b.pull(ctx, acc, startup || b.fullPullDue()) {
				startup = false
				backoff.Reset()
				next = now.Add(b.set.interval)
			} else if ctx.Err() == nil {
				startup = true
				next = now.Add(backoff.Next())
			}
		}
		b.sweep(acc)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pull asks the feed once and puts the answer in force; false when it failed.
func (b *bans) pull(ctx context.Context, acc telegraf.Accumulator, startup bool) bool {
	timeout := max(b.set.interval, 30*time.Second)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	d, err := b.feed.Pull(pctx, startup)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			b.failed(acc, fmt.Errorf("bans: crowdsec: %w; the bans in force stay until they expire, retrying with a full resync", err))
		}
		return false
	}
	if err := b.state.Apply(b.tableLocked(), d, time.Now()); err != nil {
		b.failed(acc, fmt.Errorf("bans: %w", err))
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

// roomBack records that bans of another origin left the table: room for
// the decisions refused over max, whose retry is then due.
func (b *bans) roomBack() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state.RoomBack()
}

// noteIPRanges says once, in one line for a whole pull, that decisions of
// scope Ip on a range are enforced as that range: cscli decisions import
// (1.4) gives every row of a list its --scope, default Ip.
func (b *bans) noteIPRanges(d crowdsec.Delta) {
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
func (b *bans) sweep(acc telegraf.Accumulator) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.state.Expire(b.tableLocked(), time.Now()); err != nil {
		b.failed(acc, fmt.Errorf("bans: %w", err))
	}
}

// failed records err for the points and passes it to acc once per change.
func (b *bans) failed(acc telegraf.Accumulator, err error) {
	msg := firstLine(err)
	b.state.Failed(msg)
	if msg != b.reported {
		b.reported = msg
		acc.AddError(err)
	}
}

// recovered clears the error after a good pull, and says so once.
func (b *bans) recovered() {
	if b.reported != "" {
		b.log.Infof("bans: crowdsec: synced again")
	}
	b.state.Failed("")
	b.reported = ""
}

// tableLocked is the ban table the decisions go on; nil before one loads.
func (b *bans) tableLocked() ibans.Table {
	if b.table == nil {
		return nil
	}
	return b.table
}

// counts are the feed's counts now, and its bans in force (not the other
// origins' claims on the table).
func (b *bans) counts() ibans.Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.state.Counts()
	if b.table != nil {
		v4, v6 := b.table.InForceOf(bpf.BanOriginCrowdSec)
		c.Active = int64(v4 + v6)
	}
	return c
}
