package crowdsec_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
)

// addMachine registers a machine with a password on l.
func addMachine(t *testing.T, l *lapi.LAPI, login, password string) {
	t.Helper()
	l.Cscli("machines", "add", login, "--password", password, "--force", "-f", filepath.Join(t.TempDir(), "creds.yaml"))
}

// TestPushReachesABouncer posts bans as a machine to a real LAPI: each
// arrives in a bouncer's stream with its scope, prefix and duration.
func TestPushReachesABouncer(t *testing.T) {
	l := lapi.Start(t)
	addMachine(t, l, "xdp-drop-test", "s3cret-pass-word")
	key := l.AddBouncer("xdp-drop-fleet")
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: l.URL(), Login: "xdp-drop-test", Password: "s3cret-pass-word", UserAgent: "xdp-drop/test"})
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Now()
	for _, b := range []crowdsec.Ban{
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Start: now, Duration: 10 * time.Minute, Events: 1000, Message: "test range"},
		{Prefix: netip.MustParsePrefix("192.0.2.9/32"), Start: now, Duration: 20 * time.Minute, Events: 5, Message: "test address"},
		{Prefix: netip.MustParsePrefix("2001:db8:7::/64"), Start: now, Duration: time.Hour, Events: 5, Message: "test v6"},
	} {
		id, err := p.Push(ctx, b)
		require.NoError(t, err, "%s", b.Prefix)
		require.NotEmpty(t, id)
	}
	c := lapiClient(t, l, key)
	d, err := c.Pull(ctx, true)
	require.NoError(t, err)
	got := map[string]crowdsec.Decision{}
	for _, dec := range d.New {
		got[dec.Value] = dec
	}
	require.Len(t, got, 3)
	for value, want := range map[string]struct {
		scope, prefix string
		d             time.Duration
	}{
		"203.0.113.0/24":  {"Range", "203.0.113.0/24", 10 * time.Minute},
		"192.0.2.9":       {"Ip", "192.0.2.9/32", 20 * time.Minute},
		"2001:db8:7::/64": {"Range", "2001:db8:7::/64", time.Hour},
	} {
		dec, ok := got[value]
		require.True(t, ok, "%s missing from the stream: %v", value, got)
		require.Equal(t, want.scope, dec.Scope)
		require.Equal(t, "ban", dec.Type)
		require.Equal(t, netip.MustParsePrefix(want.prefix), dec.Prefix)
		require.LessOrEqual(t, dec.Duration, want.d)
		require.Greater(t, dec.Duration, want.d-time.Minute)
		require.Equal(t, crowdsec.DefaultScenario, dec.Scenario)
	}
}

func TestPushWrongPassword(t *testing.T) {
	l := lapi.Start(t)
	addMachine(t, l, "xdp-drop-test", "s3cret-pass-word")
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: l.URL(), Login: "xdp-drop-test", Password: "wrong"})
	require.NoError(t, err)
	_, err = p.Push(context.Background(), crowdsec.Ban{Prefix: netip.MustParsePrefix("192.0.2.1/32"), Start: time.Now(), Duration: time.Minute})
	require.ErrorIs(t, err, crowdsec.ErrLoginRefused)
	require.NotContains(t, err.Error(), "wrong", "the password is never shown")
}

// TestPushLogsInAgainOn401: a token the LAPI refuses is renewed once.
func TestPushLogsInAgainOn401(t *testing.T) {
	var logins, posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/watchers/login":
			n := logins.Add(1)
			_, _ = w.Write([]byte(`{"code":200,"token":"t` + string(rune('0'+n)) + `"}`))
		case "/v1/alerts":
			posts.Add(1)
			if r.Header.Get("Authorization") == "Bearer t1" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`["42"]`))
		}
	}))
	defer srv.Close()
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: srv.URL, Login: "m", Password: "p"})
	require.NoError(t, err)
	id, err := p.Push(context.Background(), crowdsec.Ban{Prefix: netip.MustParsePrefix("192.0.2.1/32"), Start: time.Now(), Duration: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "42", id)
	require.Equal(t, int32(2), logins.Load())
	require.Equal(t, int32(2), posts.Load())
}

// TestPushQueueRetries: posts that fail are retried until the LAPI takes
// the ban, each failure counted; a full queue drops and counts.
func TestPushQueueRetries(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/watchers/login":
			_, _ = w.Write([]byte(`{"code":200,"token":"t"}`))
		case "/v1/alerts":
			if posts.Add(1) <= 2 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`["1"]`))
		}
	}))
	defer srv.Close()
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: srv.URL, Login: "m", Password: "p"})
	require.NoError(t, err)
	q := crowdsec.NewPushQueue(p, 1, time.Millisecond, 10*time.Millisecond)
	b := crowdsec.Ban{Prefix: netip.MustParsePrefix("192.0.2.1/32"), Start: time.Now(), Duration: time.Hour}
	require.True(t, q.Offer(b))
	require.False(t, q.Offer(b), "the queue holds one")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	require.Eventually(t, func() bool { return q.Stats().Pushed == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	<-done
	s := q.Stats()
	require.Equal(t, crowdsec.PushStats{Pushed: 1, Failed: 2, Dropped: 1}, s)
	require.Equal(t, int32(3), posts.Load())
}
