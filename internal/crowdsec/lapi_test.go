package crowdsec_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
)

func lapiClient(t *testing.T, l *lapi.LAPI, key string) *crowdsec.Client {
	t.Helper()
	c, err := crowdsec.New(crowdsec.Config{URL: l.URL(), APIKey: key, UserAgent: "xdp-drop/test"})
	require.NoError(t, err)
	return c
}

// byValue indexes decisions by their value, failing on a value seen twice.
func byValue(t *testing.T, ds []crowdsec.Decision) map[string]crowdsec.Decision {
	t.Helper()
	m := make(map[string]crowdsec.Decision)
	for _, d := range ds {
		_, dup := m[d.Value]
		require.False(t, dup, "value %s twice", d.Value)
		m[d.Value] = d
	}
	return m
}

// requireDecision checks one decision arrived as added: scope, prefix, and
// a duration at most what was asked and less than a minute short of it.
func requireDecision(t *testing.T, got map[string]crowdsec.Decision, value, scope, prefix string, asked time.Duration) {
	t.Helper()
	d, ok := got[value]
	require.True(t, ok, "decision on %s missing", value)
	require.Equal(t, scope, d.Scope)
	require.Equal(t, "ban", d.Type)
	require.Equal(t, "cscli", d.Origin)
	require.Equal(t, netip.MustParsePrefix(prefix), d.Prefix)
	require.LessOrEqual(t, d.Duration, asked)
	require.Greater(t, d.Duration, asked-time.Minute)
	require.NotZero(t, d.ID)
}

// TestLAPIStreamStartupDeltaDeletion pulls a real LAPI: decisions added with
// cscli arrive at startup with scope, value and duration right, one added
// later arrives in a delta, and a deletion arrives in deleted.
func TestLAPIStreamStartupDeltaDeletion(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("192.0.2.7", 2*time.Hour)
	l.AddDecision("198.51.100.0/24", time.Hour)
	l.AddDecision("2001:db8::1", 30*time.Minute)
	l.AddDecision("2001:db8:1::/48", 3*time.Hour)
	l.AddDecisionType("192.0.2.8", "captcha", time.Hour)
	c := lapiClient(t, l, key)
	ctx := context.Background()

	d, err := c.Pull(ctx, true)
	require.NoError(t, err)
	require.True(t, d.Startup)
	require.Len(t, d.New, 4)
	got := byValue(t, d.New)
	requireDecision(t, got, "192.0.2.7", "Ip", "192.0.2.7/32", 2*time.Hour)
	requireDecision(t, got, "198.51.100.0/24", "Range", "198.51.100.0/24", time.Hour)
	requireDecision(t, got, "2001:db8::1", "Ip", "2001:db8::1/128", 30*time.Minute)
	requireDecision(t, got, "2001:db8:1::/48", "Range", "2001:db8:1::/48", 3*time.Hour)
	require.Empty(t, d.Deleted)
	require.Equal(t, map[crowdsec.Reason]int{crowdsec.IgnoredType: 1}, d.Ignored, "the captcha")

	d, err = c.Pull(ctx, false)
	require.NoError(t, err)
	require.Empty(t, d.New, "a delta right after startup")
	require.Empty(t, d.Deleted, "a delta right after startup")

	// The LAPI compares creation times with the previous pull's start.
	time.Sleep(1100 * time.Millisecond)
	l.AddDecision("203.0.113.9", 4*time.Hour)
	d, err = c.Pull(ctx, false)
	require.NoError(t, err)
	require.False(t, d.Startup)
	require.Len(t, d.New, 1)
	requireDecision(t, byValue(t, d.New), "203.0.113.9", "Ip", "203.0.113.9/32", 4*time.Hour)

	l.DeleteDecision("192.0.2.7")
	d, err = c.Pull(ctx, false)
	require.NoError(t, err)
	require.Empty(t, d.New)
	require.Len(t, d.Deleted, 1)
	del := d.Deleted[0]
	require.Equal(t, "192.0.2.7", del.Value)
	require.Equal(t, netip.MustParsePrefix("192.0.2.7/32"), del.Prefix)
	require.LessOrEqual(t, del.Duration, time.Duration(0), "a deleted decision's time left")

	// A startup pull's list of what expired or went is read through: New replaces the bans.
	d, err = c.Pull(ctx, true)
	require.NoError(t, err)
	require.Len(t, d.New, 4)
	require.NotContains(t, byValue(t, d.New), "192.0.2.7")
	require.Empty(t, d.Deleted)
}

// TestLAPIWrongKey checks the real LAPI's refusal reads as the key refused, without the key.
func TestLAPIWrongKey(t *testing.T) {
	l := lapi.Start(t)
	l.AddBouncer("real")
	wrong := "0123456789abcdef0123456789abcdef"
	_, err := lapiClient(t, l, wrong).Pull(context.Background(), true)
	require.ErrorIs(t, err, crowdsec.ErrKeyRefused)
	require.EqualError(t, err, "crowdsec LAPI "+l.URL()+": bouncer API key refused (HTTP 403); create a bouncer key on the LAPI host with 'cscli bouncers add <name>' and set api_key or api_key_file to it")
}

// TestLAPIStoppedAndRestarted checks a stopped LAPI is a connection error and,
// restarted on its database, serves a startup pull that shows a deletion made meanwhile.
func TestLAPIStoppedAndRestarted(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("restart")
	l.AddDecision("192.0.2.1", time.Hour)
	l.AddDecision("192.0.2.2", time.Hour)
	c := lapiClient(t, l, key)
	ctx := context.Background()
	d, err := c.Pull(ctx, true)
	require.NoError(t, err)
	require.Len(t, d.New, 2)

	l.Stop()
	_, err = c.Pull(ctx, false)
	require.EqualError(t, err, "crowdsec LAPI "+l.URL()+": connection refused; is the LAPI running and listening there (api.server.listen_uri in crowdsec's config.yaml)?")
	require.False(t, strings.Contains(err.Error(), key))

	l.Restart()
	l.DeleteDecision("192.0.2.1")
	d, err = c.Pull(ctx, true)
	require.NoError(t, err)
	require.Len(t, d.New, 1)
	require.Equal(t, "192.0.2.2", d.New[0].Value, "192.0.2.1, deleted meanwhile, is not in the full list")
	require.Empty(t, d.Deleted)
}

// BenchmarkLAPIStartup100k times a startup pull of 100,000 decisions (half
// addresses, half ranges, both families) from a real LAPI, over HTTP.
func BenchmarkLAPIStartup100k(b *testing.B) {
	const n = 100_000
	l := lapi.Start(b)
	ds := make([]lapi.Decision, 0, n)
	for i := 0; i < n; i++ {
		var v string
		switch i % 4 {
		case 0:
			v = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		case 1:
			v = netip.PrefixFrom(netip.AddrFrom4([4]byte{100 + byte(i>>16), byte(i >> 8), byte(i), 0}), 24).String()
		case 2:
			v = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}).String()
		default:
			v = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 5: byte(i >> 16), 6: byte(i >> 8), 7: byte(i)}), 64).String()
		}
		ds = append(ds, lapi.Decision{Value: v, Duration: 4 * time.Hour})
	}
	start := time.Now()
	l.Import(ds)
	b.Logf("cscli decisions import of %d: %s", n, time.Since(start))
	c, err := crowdsec.New(crowdsec.Config{URL: l.URL(), APIKey: l.AddBouncer("bench"), Timeout: 5 * time.Minute})
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.Pull(context.Background(), true)
		require.NoError(b, err)
		require.Len(b, d.New, n)
	}
}

// TestLAPIStartupWithManyExpired: a real LAPI keeps expired decisions and
// lists them in a startup answer's deleted; 300 of them beside 1 in force
// sync under a bound of 2, and none is returned.
func TestLAPIStartupWithManyExpired(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("expired")
	var ds []lapi.Decision
	for i := range 300 {
		ds = append(ds, lapi.Decision{Value: fmt.Sprintf("10.%d.%d.1", i/250, i%250), Duration: 2 * time.Second})
	}
	l.Import(ds)
	time.Sleep(3 * time.Second)
	l.AddDecision("198.51.100.7", time.Hour)
	c, err := crowdsec.New(crowdsec.Config{URL: l.URL(), APIKey: key, UserAgent: "xdp-drop/test", MaxDecisions: 2})
	require.NoError(t, err)
	d, err := c.Pull(context.Background(), true)
	require.NoError(t, err)
	require.Len(t, d.New, 1)
	require.Equal(t, "198.51.100.7", d.New[0].Value)
	require.Empty(t, d.Deleted)
}
