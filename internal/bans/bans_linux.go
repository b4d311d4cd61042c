//go:build linux

package bans

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// Feed is where decisions come from: the CrowdSec stream client.
type Feed interface {
	Pull(ctx context.Context, startup bool) (crowdsec.Delta, error)
}

// Bans owns the timed bans of a plugin instance: the kernel's ban table
// it is given (shared by every interface's program), the decisions in
// force, the poller that pulls the feed on its own clock, puts its deltas
// in force and sweeps the bans past their end, and the detection.
type Bans struct {
	set  Settings
	log  Logger
	feed Feed

	mu       sync.Mutex
	table    *bpf.BanTable
	allow    []netip.Prefix // in force on the table
	state    *Decisions
	reported string // the error last reported; "" when the feed is fine
	cancel   context.CancelFunc
	done     chan struct{}
	// started: the poller ran (or runs); a stopped owner starts no more.
	started bool
	// detect owns the detection; nil without one.
	detect *detection
	// resync: the allowed prefixes changed, so the next pull is a full
	// one, which bans again what they no longer cover; lastFull is when
	// the last full pull was put in force, resyncAt when the next periodic
	// one is due (Feed.Resync after it, less a jitter).
	resync   bool
	lastFull time.Time
	resyncAt time.Time
	// ipRangesNoted: decisions of scope Ip on a range were logged once.
	ipRangesNoted bool
}

// New makes the bans of set, with its CrowdSec client; an error is a
// *SettingError.
func New(set Settings, log Logger) (*Bans, error) {
	var warn func(string, ...any)
	if log != nil {
		warn = log.Warnf
	}
	// The decisions held are bounded at twice max, both families full.
	b := &Bans{set: set, log: log, allow: set.Allow, state: NewDecisions(bpf.BanOriginCrowdSec, 2*set.Max, warn)}
	if f := set.Feed; f != nil {
		client, err := crowdsec.New(crowdsec.Config{
			URL: set.LAPI, APIKey: f.APIKey, Types: f.Types, TLS: set.TLS, UserAgent: set.UserAgent,
			// Both families' bans, beyond max too: those are refused and counted.
			MaxDecisions: max(crowdsec.DefaultMaxDecisions, 2*set.Max),
		})
		if err != nil {
			return nil, &SettingError{SettingFeed, err}
		}
		b.feed = client
	}
	if set.Detect != nil {
		d, err := newDetection(&b.set, log)
		if err != nil {
			return nil, err
		}
		d.roomBack = b.roomBack
		b.detect = d
	}
	return b, nil
}

// Use puts the bans on table, the one the programs attached now run on
// (err: why it did not load), and starts the poller the first time. A
// table taken over from a predecessor holds its bans: the first full pull
// keeps those the LAPI still has and lifts the others.
func (b *Bans) Use(report Errors, table *bpf.BanTable, err error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failed(report, fmt.Errorf("bans: load the ban maps: %w", err))
		return
	}
	if table != b.table {
		if !b.setAllow(report, table) {
			return
		}
		b.table = table
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
	go b.poll(ctx, report)
}

// Allow puts allow in force as the allowed prefixes (a file of them
// changed): the next pull is a full one. False when it failed (reported).
func (b *Bans) Allow(report Errors, allow []netip.Prefix) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allow = allow
	if b.table == nil {
		return true // put in force with the table
	}
	if !b.setAllow(report, b.table) {
		return false
	}
	b.resync = true
	return true
}

// setAllow puts the allowed prefixes in force in table; bans inside them
// are lifted. False when it failed (reported).
func (b *Bans) setAllow(report Errors, table *bpf.BanTable) bool {
	// The feed's own bans that the allowed prefixes lifted are its removed.
	before, _ := table.InForceOf(bpf.BanOriginCrowdSec)
	if _, err := table.SetAllow(b.allow); err != nil {
		b.failed(report, fmt.Errorf("bans: set the allowed prefixes: %w", err))
		return false
	}
	after, _ := table.InForceOf(bpf.BanOriginCrowdSec)
	b.state.Lifted(before - after)
	if b.detect != nil {
		b.detect.guards.setAllow(b.allow)
	}
	return true
}

// Stop ends the poller and the detection; the bans stay in the table, for
// a successor that takes the maps over or until the programs go.
func (b *Bans) Stop() {
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

// Counts are the feed's counts now, and its bans in force (not the other
// origins' claims on the table).
func (b *Bans) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.state.Counts()
	if b.table != nil {
		v4, v6 := b.table.InForceOf(bpf.BanOriginCrowdSec)
		c.Active = int64(v4 + v6)
	}
	return c
}

// roomBack records that bans of another origin left the table: room for
// the decisions refused over max, whose retry is then due.
func (b *Bans) roomBack() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state.RoomBack()
}

// Detecting says whether the bans have a detection.
func (b *Bans) Detecting() bool { return b != nil && b.detect != nil }

// Watch makes the window of an interface's sampled passed frames, rated
// against what prog passed; nil without a detection.
func (b *Bans) Watch(name string, prog *bpf.Program) *detect.Window {
	if !b.Detecting() {
		return nil
	}
	return b.detect.watch(name, &progPassed{prog: prog})
}

// Unwatch forgets a window: once it returns, its counters are not read.
func (b *Bans) Unwatch(w *detect.Window) {
	if b.Detecting() {
		b.detect.unwatch(w)
	}
}

// TakeEvents appends the detection's events of the interval to out and
// starts the next.
func (b *Bans) TakeEvents(out []Event) []Event {
	if !b.Detecting() {
		return out
	}
	return b.detect.takeEvents(out)
}

// Detection is the detection's state now, for its points.
func (b *Bans) Detection() DetectCounts {
	if !b.Detecting() {
		return DetectCounts{}
	}
	return b.detect.snapshot()
}

// WrapFeed puts wrap's answer in the feed's place, before Use starts the
// poller: a feed seen through another (a test's count of its pulls).
func (b *Bans) WrapFeed(wrap func(Feed) Feed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.feed != nil && !b.started {
		b.feed = wrap(b.feed)
	}
}
