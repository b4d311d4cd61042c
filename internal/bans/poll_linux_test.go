//go:build linux

package bans

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// scriptedFeed answers pulls in turn from its script, and records whether
// each asked for the full list.
type scriptedFeed struct {
	mu       sync.Mutex
	script   []error // nil: a good answer
	startups []bool
}

func (f *scriptedFeed) Pull(_ context.Context, startup bool) (crowdsec.Delta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.startups)
	f.startups = append(f.startups, startup)
	if n < len(f.script) && f.script[n] != nil {
		return crowdsec.Delta{}, f.script[n]
	}
	d := crowdsec.Delta{Startup: startup}
	if startup {
		d.New = []crowdsec.Decision{{ID: 1, Prefix: netip.MustParsePrefix("203.0.113.0/24"), Duration: time.Hour}}
	}
	return d, nil
}

func (f *scriptedFeed) pulls() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.startups...)
}

// TestBansPollResyncsAfterFailure: the poller asks for the full list at
// its first pull and at the first after any failure, and for deltas
// otherwise; the bans stay in the kernel's table throughout.
func TestBansPollResyncsAfterFailure(t *testing.T) {
	testns.RequirePrivileged(t)
	down := errors.New("crowdsec LAPI http://lapi/: connection refused")
	feed := &scriptedFeed{script: []error{nil, nil, down, down, nil, nil}}
	set := Settings{Max: 16, Feed: &FeedSettings{Interval: 100 * time.Millisecond}}
	b := &Bans{set: set, log: testLog{}, feed: feed, state: NewDecisions(bpf.BanOriginCrowdSec, 0, nil)}
	in := bpf.NewInstance(bpf.Policy{DropAll: true, Bans: bpf.BansConfig{On: true, Max: 16}})
	defer in.Close()
	acc := &errorsSeen{}
	table, err := in.Bans()
	b.Use(acc, table, err)
	deadline := time.Now().Add(testns.Hang)
	for len(feed.pulls()) < 7 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	b.Stop()
	require.Equal(t, []bool{true, false, false, true, true, false, false}, feed.pulls()[:7])
	c := b.Counts()
	require.Equal(t, int64(1), c.Active)
	require.Equal(t, int64(1), c.Added, "the full lists after the failure find the ban in force")
	require.Empty(t, c.Error)
	require.Len(t, acc.Errors, 1, "the failure reported once: %v", acc.Errors)
}

// missingFeed is a LAPI whose deltas miss every change made after the
// first full list: only a later full list brings it.
type missingFeed struct {
	mu       sync.Mutex
	full     []crowdsec.Decision
	startups []bool
}

func (f *missingFeed) Pull(_ context.Context, startup bool) (crowdsec.Delta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startups = append(f.startups, startup)
	if !startup {
		return crowdsec.Delta{}, nil
	}
	return crowdsec.Delta{Startup: true, New: append([]crowdsec.Decision(nil), f.full...)}, nil
}

func (f *missingFeed) add(d crowdsec.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.full = append(f.full, d)
}

func (f *missingFeed) drop(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, d := range f.full {
		if d.ID == id {
			f.full = append(f.full[:i], f.full[i+1:]...)
			return
		}
	}
}

func (f *missingFeed) pulls() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.startups...)
}

// TestBansPollPeriodicResync: between good deltas the poller pulls the
// full list every Resync (less its jitter, never more often), so a
// decision the deltas never brought is banned within Resync, and said.
func TestBansPollPeriodicResync(t *testing.T) {
	testns.RequirePrivileged(t)
	const interval, resync = 50 * time.Millisecond, 500 * time.Millisecond
	feed := &missingFeed{full: []crowdsec.Decision{{ID: 1, Type: "ban", Scope: "Range", Value: "203.0.113.0/24", Prefix: netip.MustParsePrefix("203.0.113.0/24"), Duration: time.Hour}}}
	log := &infoLog{}
	set := Settings{Max: 16, Feed: &FeedSettings{Interval: interval, Resync: resync}}
	b := &Bans{set: set, log: log, feed: feed, state: NewDecisions(bpf.BanOriginCrowdSec, 0, nil)}
	in := bpf.NewInstance(bpf.Policy{DropAll: true, Bans: bpf.BansConfig{On: true, Max: 16}})
	defer in.Close()
	acc := &errorsSeen{}
	table, err := in.Bans()
	start := time.Now()
	b.Use(acc, table, err)
	defer b.Stop()
	waitFor(t, func() bool { return len(feed.pulls()) >= 3 }, "three pulls")
	require.Equal(t, int64(1), b.Counts().Active)
	feed.add(crowdsec.Decision{ID: 2, Type: "ban", Scope: "Ip", Value: "198.51.100.7", Prefix: netip.MustParsePrefix("198.51.100.7/32"), Duration: time.Hour})
	waitFor(t, func() bool { return b.Counts().Active == 2 }, "the missed decision banned")
	took := time.Since(start)
	require.GreaterOrEqual(t, took, resync-resync/10, "no full pull before resync, less its jitter")
	feed.drop(1)
	waitFor(t, func() bool { return b.Counts().Active == 1 }, "the missed deletion lifted")
	b.Stop()

	pulls := feed.pulls()
	require.True(t, pulls[0], "the first pull is a full one")
	fulls := 0
	for _, full := range pulls[1:] {
		if full {
			fulls++
		}
	}
	require.GreaterOrEqual(t, fulls, 1, "a periodic full pull: %v", pulls)
	require.Empty(t, acc.Errors)
	c := b.Counts()
	require.Equal(t, int64(2), c.Added)
	require.Equal(t, int64(1), c.Removed)
	var held []netip.Prefix
	for _, e := range table.Entries() {
		held = append(held, e.Prefix)
	}
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}, held, "the missed deletion lifted in the kernel's table, the missed ban in it")
	var said []string
	for _, l := range log.infos { // read once the poller stopped
		if strings.Contains(l, "periodic full pull") {
			said = append(said, l)
		}
	}
	require.Equal(t, []string{
		"bans: crowdsec: the periodic full pull (resync = 500ms) found what the LAPI's deltas had missed: banned 1 prefix, lifted 0 bans (the LAPI can miss a decision made while it answers a pull)",
		"bans: crowdsec: the periodic full pull (resync = 500ms) found what the LAPI's deltas had missed: banned 0 prefixes, lifted 1 ban (the LAPI can miss a decision made while it answers a pull)",
	}, said, "said for each full pull that changed something, not for those that changed nothing")
}

// waitFor polls ok until it holds, failing the test after testns.Hang.
func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for !ok() {
		require.True(t, time.Now().Before(deadline), "waited %v for %s", testns.Hang, what)
		time.Sleep(10 * time.Millisecond)
	}
}
