//go:build linux

package xdp_drop

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// fakeLAPI answers the bouncer stream with what the test sets: good
// decisions, then garbage, as a LAPI gone wrong (or something else at its
// address) would.
type fakeLAPI struct {
	mu     sync.Mutex
	ctype  string
	body   string
	pulls  int
	server *httptest.Server
}

func newFakeLAPI(t *testing.T, body string) *fakeLAPI {
	f := &fakeLAPI{ctype: "application/json", body: body}
	f.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		ctype, body := f.ctype, f.body
		f.pulls++
		f.mu.Unlock()
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(f.server.Close)
	return f
}

func (f *fakeLAPI) answer(ctype, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctype, f.body = ctype, body
}

// streamJSON is a stream answer of decisions written as the LAPI writes them.
func streamJSON(decisions ...string) string {
	return `{"new":[` + strings.Join(decisions, ",") + `],"deleted":null}`
}

func decisionJSON(id int, scope, value string) string {
	return fmt.Sprintf(`{"id":%d,"origin":"cscli","type":"ban","scope":%q,"value":%q,"duration":"3h59m58s","scenario":"manual"}`, id, scope, value)
}

// TestBansBadAnswers: a LAPI that answers garbage, 10 MB of JSON or an
// HTML page after a good answer leaves the bans in force, and the error on
// the point names the LAPI and what was wrong; once it answers well again
// the error clears.
func TestBansBadAnswers(t *testing.T) {
	good := streamJSON(decisionJSON(1, "Range", "203.0.113.0/24"))
	huge := `{"new":[{"id":2,"origin":"cscli","type":"ban","scope":"Ip","value":"` + strings.Repeat("9", 10<<20) + `","duration":"1h"}],"deleted":null}`
	for _, c := range []struct {
		name, ctype, body, want string
	}{
		{"garbage", "application/json", "}{ not json at all", "crowdsec LAPI"},
		{"10 MB of JSON", "application/json", huge, "crowdsec LAPI"},
		{"a web page", "text/html", "<html><body>It works!</body></html>", `not application/json`},
	} {
		t.Run(c.name, func(t *testing.T) {
			lapi := newFakeLAPI(t, good)
			ns := testns.New(t)
			p := banPluginAt(lapi.server.URL+"/", testBouncerKey, nil)
			require.Empty(t, startPlugin(t, ns, p).Errors)
			waitBans(t, ns, p, "the good answer in force", func(f map[string]any) bool { return field(f, FieldActive) == 1 })
			lapi.answer(c.ctype, c.body)
			f := waitBans(t, ns, p, "the bad answer reported", func(f map[string]any) bool { return f[FieldError] != nil })
			require.Contains(t, f[FieldError], c.want)
			require.Contains(t, f[FieldError], lapi.server.URL)
			require.Less(t, len(f[FieldError].(string)), 1024, "the error field is one short line")
			require.Equal(t, int64(1), field(f, FieldActive), "the bans in force stay")
			sendBanFlows(t, ns, banFlow{"203.0.113.5", 4, 0}, banFlow{"198.51.100.1", 2, 2})
			lapi.answer("application/json", good)
			waitBans(t, ns, p, "the error cleared", func(f map[string]any) bool { return f[FieldError] == nil && field(f, FieldActive) == 1 })
		})
	}
}

// TestBansFeedUnreachable: a wrong key (refused by a real LAPI) and a url
// where nothing listens are reported on the point and logged, the key
// never shown; nothing is banned and synced stays 0.
func TestBansFeedUnreachable(t *testing.T) {
	l := lapi.Start(t)
	l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nowhere := "http://" + closed.Addr().String() + "/"
	closed.Close()
	for _, c := range []struct {
		name, url, want string
	}{
		{"wrong key", l.URL(), "bouncer API key refused (HTTP 403); create a bouncer key on the LAPI host with 'cscli bouncers add <name>'"},
		{"nothing listens", nowhere, "connection refused; is the LAPI running and listening there"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := testns.New(t)
			p := banPluginAt(c.url, testBouncerKey, nil)
			log := &testutil.CaptureLogger{}
			p.Log = log
			acc := startPlugin(t, ns, p)
			f := waitBans(t, ns, p, "the error reported", func(f map[string]any) bool { return f[FieldError] != nil })
			require.Contains(t, f[FieldError], c.want)
			require.Equal(t, int64(0), field(f, FieldSynced))
			require.Equal(t, int64(0), field(f, FieldActive))
			sendBanFlows(t, ns, banFlow{"203.0.113.5", 3, 3})
			var text []string
			for _, e := range acc.Errors {
				text = append(text, e.Error())
			}
			for _, m := range log.Messages() {
				text = append(text, m.Text)
			}
			require.Contains(t, strings.Join(text, "\n"), c.want)
			require.NotContains(t, strings.Join(text, "\n"), testBouncerKey, "the key is never logged")
		})
	}
}

// TestBansRefused: decisions the bans cannot take are counted refused and
// the others put in force: a malformed value, a scope bans do not take,
// and those beyond max.
func TestBansRefused(t *testing.T) {
	lapi := newFakeLAPI(t, streamJSON(
		decisionJSON(1, "Ip", "198.51.100.1"),
		decisionJSON(2, "Ip", "198.51.100.300"),
		decisionJSON(3, "Country", "FR"),
		decisionJSON(4, "Ip", "198.51.100.2"),
		decisionJSON(5, "Ip", "198.51.100.3"),
	))
	ns := testns.New(t)
	p := banPluginAt(lapi.server.URL+"/", testBouncerKey, &BansConfig{Max: 2})
	require.Empty(t, startPlugin(t, ns, p).Errors)
	f := waitBans(t, ns, p, "the answer in force", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	require.Equal(t, int64(2), field(f, FieldActive))
	require.Equal(t, int64(2), field(f, FieldAdded))
	require.Equal(t, int64(3), field(f, FieldRefused), "a malformed value, a Country and one over max")
	sendBanFlows(t, ns, banFlow{"198.51.100.1", 2, 0}, banFlow{"198.51.100.2", 2, 0}, banFlow{"198.51.100.3", 2, 2})
}
