package crowdsec_test

import (
	"context"
	"encoding/json"
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
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Start: now, Duration: 10 * time.Minute, Message: "test range"},
		{Prefix: netip.MustParsePrefix("192.0.2.9/32"), Start: now, Duration: 20 * time.Minute, Message: "test address"},
		{Prefix: netip.MustParsePrefix("2001:db8:7::/64"), Start: now, Duration: time.Hour, Message: "test v6"},
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

// TestPushAlertAsCrowdSecShowsIt posts a ban and reads its alert back as
// 'cscli alerts inspect' shows it: the scenario and its version, the
// source's scope and value, one event whose meta is the source and the
// evidence, the machine that posted it, and the version the LAPI
// recorded for that machine from the User-Agent.
func TestPushAlertAsCrowdSecShowsIt(t *testing.T) {
	l := lapi.Start(t)
	addMachine(t, l, "xdp-drop-edge1", "s3cret-pass-word")
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: l.URL(), Login: "xdp-drop-edge1", Password: "s3cret-pass-word", UserAgent: "xdp-drop/1.2.3"})
	require.NoError(t, err)
	evidence := []crowdsec.Meta{{Key: "pps", Value: "12000"}, {Key: "interface", Value: "eth1"}, {Key: "verified", Value: "false"}}
	for _, c := range []struct {
		prefix, scope, value, key string
	}{
		{"203.0.113.0/24", "Range", "203.0.113.0/24", "source_range"},
		{"192.0.2.9/32", "Ip", "192.0.2.9", "source_ip"},
	} {
		id, err := p.Push(context.Background(), crowdsec.Ban{Prefix: netip.MustParsePrefix(c.prefix), Start: time.Now(), Duration: time.Hour, Message: "test", Evidence: evidence})
		require.NoError(t, err)
		var got struct {
			MachineID       string `json:"machine_id"`
			Scenario        string `json:"scenario"`
			ScenarioVersion string `json:"scenario_version"`
			EventsCount     int    `json:"events_count"`
			Source          struct{ Scope, Value string }
			Events          []struct{ Meta []crowdsec.Meta }
		}
		require.NoError(t, json.Unmarshal([]byte(l.Cscli("alerts", "inspect", id, "-o", "json")), &got))
		require.Equal(t, "xdp-drop-edge1", got.MachineID)
		require.Equal(t, crowdsec.DefaultScenario, got.Scenario)
		require.Equal(t, "1.2.3", got.ScenarioVersion, "the version of the User-Agent")
		require.Equal(t, c.scope, got.Source.Scope)
		require.Equal(t, c.value, got.Source.Value)
		require.Equal(t, 1, got.EventsCount, "one event, the detection")
		require.Len(t, got.Events, 1)
		require.Equal(t, append([]crowdsec.Meta{{Key: c.key, Value: c.value}}, evidence...), got.Events[0].Meta)
	}
	var machines []struct {
		MachineID string `json:"machineId"`
		Version   string `json:"version"`
	}
	require.NoError(t, json.Unmarshal([]byte(l.Cscli("machines", "list", "-o", "json")), &machines))
	versions := map[string]string{}
	for _, m := range machines {
		versions[m.MachineID] = m.Version
	}
	require.Equal(t, "1.2.3", versions["xdp-drop-edge1"], "the machine's version as the LAPI recorded it")
}
