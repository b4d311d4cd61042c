//go:build linux

package bans

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// fixedFeed answers every pull with d.
type fixedFeed struct{ d crowdsec.Delta }

func (f *fixedFeed) Pull(_ context.Context, startup bool) (crowdsec.Delta, error) {
	d := f.d
	d.Startup = startup
	return d, nil
}

// warnLog records the warnings the bans log.
type warnLog struct {
	testLog
	warnings []string
}

func (l *warnLog) Warnf(format string, args ...any) {
	l.warnings = append(l.warnings, fmt.Sprintf(format, args...))
}

// bansOnKernel is a bans owner fed by feed on a real ban table of max bans.
func bansOnKernel(t *testing.T, feed Feed, max int) (*Bans, *bpf.BanTable, *warnLog) {
	testns.RequirePrivileged(t)
	log := &warnLog{}
	state := NewDecisions(bpf.BanOriginCrowdSec, 0, log.Warnf)
	b := &Bans{set: Settings{Max: max, Feed: &FeedSettings{Interval: time.Second}}, log: log, feed: feed, state: state}
	in := bpf.NewInstance(bpf.Policy{DropAll: true, Bans: bpf.BansConfig{On: true, Max: max}})
	t.Cleanup(func() { in.Close() })
	table, err := in.Bans()
	require.NoError(t, err)
	b.table = table
	return b, table, log
}

// TestBanDecisionTheTableCannotTake: a decision the LAPI accepts but the
// table cannot take (a whole family, an end past the year 2262, an end that
// passes while the pull is applied) never fails the pull: a whole family is
// refused, counted and logged once; a huge duration is capped at a year;
// one over by the time it is written is over, as one that came ended.
func TestBanDecisionTheTableCannotTake(t *testing.T) {
	good := crowdsec.Decision{ID: 1, Prefix: netip.MustParsePrefix("203.0.113.0/24"), Duration: time.Hour}
	cases := []struct {
		name             string
		bad              crowdsec.Decision
		added, refused   int64
		warning          string
		endWithinOneYear bool
	}{
		{name: "0.0.0.0/0", bad: crowdsec.Decision{ID: 2, Prefix: netip.MustParsePrefix("0.0.0.0/0"), Duration: time.Hour},
			added: 1, refused: 1, warning: "bans: crowdsec: decision 2 on 0.0.0.0/0 refused: it covers a whole address family, and would drop every source"},
		{name: "::/0", bad: crowdsec.Decision{ID: 2, Prefix: netip.MustParsePrefix("::/0"), Duration: time.Hour},
			added: 1, refused: 1, warning: "bans: crowdsec: decision 2 on ::/0 refused: it covers a whole address family, and would drop every source"},
		{name: "::ffff:0.0.0.0/96", bad: crowdsec.Decision{ID: 2, Prefix: netip.MustParsePrefix("::ffff:0.0.0.0/96"), Duration: time.Hour},
			added: 1, refused: 1, warning: "bans: crowdsec: decision 2 on ::ffff:0.0.0.0/96 refused"},
		{name: "2500000h", bad: crowdsec.Decision{ID: 2, Prefix: netip.MustParsePrefix("198.51.100.8/32"), Duration: 2_500_000 * time.Hour},
			added: 2, endWithinOneYear: true},
		{name: "1ns", bad: crowdsec.Decision{ID: 2, Prefix: netip.MustParsePrefix("198.51.100.7/32"), Duration: time.Nanosecond},
			added: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, table, log := bansOnKernel(t, &fixedFeed{d: crowdsec.Delta{New: []crowdsec.Decision{good, c.bad}}}, 16)
			acc := &errorsSeen{}
			for range 2 {
				require.True(t, b.pull(context.Background(), acc, true), "errors: %v", acc.Errors)
			}
			require.Empty(t, acc.Errors)
			counts := b.Counts()
			require.Equal(t, c.added, counts.Added)
			require.Equal(t, 2*c.refused, counts.Refused, "refused at each of the 2 pulls")
			require.Empty(t, counts.Error)
			if c.warning != "" {
				require.Len(t, log.warnings, 1, "logged once")
				require.Contains(t, log.warnings[0], c.warning)
			} else {
				require.Empty(t, log.warnings)
			}
			if c.endWithinOneYear {
				var end time.Time
				for _, e := range table.Entries() {
					if e.Prefix == c.bad.Prefix {
						end = e.End
					}
				}
				require.WithinDuration(t, time.Now().Add(MaxDuration), end, time.Minute)
			}
		})
	}
}

// TestBansAllowChangeRetries: a decision refused as allow-listed is banned
// once the allow file no longer covers it: the change makes the next pull
// a full one, which retries it.
func TestBansAllowChangeRetries(t *testing.T) {
	feed := &fixedFeed{d: crowdsec.Delta{New: []crowdsec.Decision{{ID: 1, Prefix: netip.MustParsePrefix("198.51.100.7/32"), Duration: time.Hour}}}}
	b, table, _ := bansOnKernel(t, feed, 16)
	b.allow = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	acc := &errorsSeen{}
	require.True(t, b.setAllow(acc, table))
	require.True(t, b.pull(context.Background(), acc, true))
	require.Equal(t, Counts{Refused: 1}, withoutSynced(b.Counts()))
	require.False(t, b.fullPullDue())

	require.True(t, b.Allow(acc, []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}))
	require.True(t, b.fullPullDue(), "the allowed prefixes changed")
	require.True(t, b.pull(context.Background(), acc, b.fullPullDue()))
	require.Empty(t, acc.Errors)
	require.Equal(t, Counts{Active: 1, Added: 1, Refused: 1}, withoutSynced(b.Counts()))
	require.False(t, b.fullPullDue())
}

func withoutSynced(c Counts) Counts {
	c.Synced = 0
	return c
}

// errorsSeen records the errors reported, as Telegraf's accumulator does.
type errorsSeen struct {
	mu     sync.Mutex
	Errors []error
}

func (e *errorsSeen) AddError(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Errors = append(e.Errors, err)
}

// testLog logs to nowhere.
type testLog struct{}

func (testLog) Infof(string, ...any) {}
func (testLog) Warnf(string, ...any) {}
