//go:build linux

package bans

import (
	"context"
	"errors"
	"net/netip"
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
