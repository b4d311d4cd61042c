package crowdsec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testKey = "s3cr3t-bouncer-key-0123456789"

// serve answers every request with body as application/json and records the last request.
func serve(t *testing.T, body string) (*httptest.Server, *[]*http.Request) {
	t.Helper()
	var reqs []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs = append(reqs, r.Clone(context.Background()))
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &reqs
}

func client(t *testing.T, url string, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{URL: url, APIKey: testKey, UserAgent: "xdp-drop/test"}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	return c
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestPullParsesTheStream checks every kind of decision the stream may carry
// lands where it should: kept with its prefix and duration, or counted by reason.
func TestPullParsesTheStream(t *testing.T) {
	body := `{"deleted":[
	  {"duration":"-51.135617ms","id":1,"origin":"cscli","scenario":"manual","scope":"Ip","type":"ban","value":"192.0.2.7"},
	  {"duration":"","id":2,"origin":"cscli","scenario":"manual","scope":"Range","type":"ban","value":"2001:db8:1::/48"}
	],"new":[
	  {"duration":"3h59m58.123s","id":10,"origin":"crowdsec","scenario":"crowdsecurity/ssh-bf","scope":"Ip","type":"ban","value":"203.0.113.9","simulated":false,"uuid":"x"},
	  {"duration":"1h","id":11,"origin":"CAPI","scenario":"http-probing","scope":"ip","type":"BAN","value":"2001:db8::5"},
	  {"duration":"1h","id":12,"origin":"lists","scenario":"l","scope":"Range","type":"ban","value":"198.51.100.77/24"},
	  {"duration":"1h","id":13,"origin":"lists","scenario":"l","scope":"RANGE","type":"ban","value":"2001:db8:abcd:12::1/56"},
	  {"duration":"1h","id":14,"origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"::ffff:192.0.2.5"},
	  {"duration":"1h","id":15,"origin":"cscli","scenario":"m","scope":"Range","type":"ban","value":"::ffff:10.1.0.0/104"},
	  {"duration":"1h","id":20,"origin":"cscli","scenario":"m","scope":"Country","type":"ban","value":"FR"},
	  {"duration":"1h","id":21,"origin":"cscli","scenario":"m","scope":"AS","type":"ban","value":"64496"},
	  {"duration":"1h","id":22,"origin":"cscli","scenario":"m","scope":"Ip","type":"captcha","value":"192.0.2.8"},
	  {"duration":"1h","id":23,"origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"192.0.2.999"},
	  {"duration":"1h","id":24,"origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"fe80::1%eth0"},
	  {"duration":"1h","id":25,"origin":"cscli","scenario":"m","scope":"Range","type":"ban","value":"10.0.0.0/33"},
	  {"duration":"1h","id":26,"origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"192.0.2.0/24"},
	  {"duration":"forever","id":27,"origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"192.0.2.9"},
	  {"duration":"1h","id":"28","origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"192.0.2.10"},
	  5, null, {}, "x", [1,2],
	  {"duration":"1h","id":29,"origin":"cscli","scenario":"m","scope":"Ip","type":"ban","value":"192.0.2.11","extra":{"deep":[[[{"a":1}]]]}}
	],"future":{"x":[1,2,{"y":null}]}}`
	srv, reqs := serve(t, body)
	c := client(t, srv.URL)

	d, err := c.Pull(context.Background(), true)
	require.NoError(t, err)

	hour := time.Hour
	want := Delta{
		Startup: true,
		New: []Decision{
			{ID: 10, Origin: "crowdsec", Type: "ban", Scope: "Ip", Value: "203.0.113.9", Scenario: "crowdsecurity/ssh-bf", Prefix: pfx("203.0.113.9/32"), Duration: 3*time.Hour + 59*time.Minute + 58*time.Second + 123*time.Millisecond},
			{ID: 11, Origin: "CAPI", Type: "ban", Scope: "ip", Value: "2001:db8::5", Scenario: "http-probing", Prefix: pfx("2001:db8::5/128"), Duration: hour},
			{ID: 12, Origin: "lists", Type: "ban", Scope: "Range", Value: "198.51.100.77/24", Scenario: "l", Prefix: pfx("198.51.100.0/24"), Duration: hour},
			{ID: 13, Origin: "lists", Type: "ban", Scope: "RANGE", Value: "2001:db8:abcd:12::1/56", Scenario: "l", Prefix: pfx("2001:db8:abcd::/56"), Duration: hour},
			{ID: 14, Origin: "cscli", Type: "ban", Scope: "Ip", Value: "::ffff:192.0.2.5", Scenario: "m", Prefix: pfx("192.0.2.5/32"), Duration: hour},
			{ID: 15, Origin: "cscli", Type: "ban", Scope: "Range", Value: "::ffff:10.1.0.0/104", Scenario: "m", Prefix: pfx("10.0.0.0/8"), Duration: hour},
			{ID: 26, Origin: "cscli", Type: "ban", Scope: "Ip", Value: "192.0.2.0/24", Scenario: "m", Prefix: pfx("192.0.2.0/24"), Duration: hour},
			{ID: 29, Origin: "cscli", Type: "ban", Scope: "Ip", Value: "192.0.2.11", Scenario: "m", Prefix: pfx("192.0.2.11/32"), Duration: hour},
		},
		Deleted: nil, // a full list's deleted is read through: it replaces the state
	}
	wantDeleted := []Decision{
		{ID: 1, Origin: "cscli", Type: "ban", Scope: "Ip", Value: "192.0.2.7", Scenario: "manual", Prefix: pfx("192.0.2.7/32"), Duration: -51135617 * time.Nanosecond},
		{ID: 2, Origin: "cscli", Type: "ban", Scope: "Range", Value: "2001:db8:1::/48", Scenario: "manual", Prefix: pfx("2001:db8:1::/48"), Duration: 0},
	}
	want.Ignored = map[Reason]int{
		IgnoredScope:     2, // Country, AS
		IgnoredType:      1, // captcha
		IgnoredValue:     3, // 192.0.2.999, a zone, /33 (a prefix under scope Ip is its range)
		IgnoredDuration:  1, // forever
		IgnoredMalformed: 6, // "28" as id, 5, null, {}, "x", [1,2]
	}
	require.Equal(t, want, d)

	require.Len(t, *reqs, 1)
	r := (*reqs)[0]
	require.Equal(t, "/v1/decisions/stream", r.URL.Path)
	require.Equal(t, "startup=true", r.URL.RawQuery)
	require.Equal(t, testKey, r.Header.Get("X-Api-Key"))
	require.Equal(t, "xdp-drop/test", r.Header.Get("User-Agent"))

	d, err = c.Pull(context.Background(), false)
	require.NoError(t, err)
	require.False(t, d.Startup)
	require.Equal(t, "startup=false", (*reqs)[1].URL.RawQuery)
	want.Startup, want.Deleted = false, wantDeleted
	require.Equal(t, want, d)
}

// TestPullEmptyAnswer checks the LAPI's answer when nothing changed.
func TestPullEmptyAnswer(t *testing.T) {
	srv, _ := serve(t, `{"deleted":null,"new":null}`)
	d, err := client(t, srv.URL).Pull(context.Background(), false)
	require.NoError(t, err)
	require.Equal(t, Delta{}, d)
}

// TestPullTypes checks Config.Types chooses what is enforced, case-insensitively.
func TestPullTypes(t *testing.T) {
	srv, _ := serve(t, `{"new":[
	  {"duration":"1h","id":1,"scope":"Ip","type":"ban","value":"192.0.2.1"},
	  {"duration":"1h","id":2,"scope":"Ip","type":"captcha","value":"192.0.2.2"},
	  {"duration":"1h","id":3,"scope":"Ip","type":"throttle","value":"192.0.2.3"}]}`)
	d, err := client(t, srv.URL, func(c *Config) { c.Types = []string{"Ban", "CAPTCHA"} }).Pull(context.Background(), true)
	require.NoError(t, err)
	require.Len(t, d.New, 2)
	require.Equal(t, int64(1), d.New[0].ID)
	require.Equal(t, int64(2), d.New[1].ID)
	require.Equal(t, map[Reason]int{IgnoredType: 1}, d.Ignored)
}

// TestPullBaseURLPath checks a LAPI behind a path prefix is asked under it.
func TestPullBaseURLPath(t *testing.T) {
	srv, reqs := serve(t, `{"new":null,"deleted":null}`)
	for _, base := range []string{srv.URL + "/crowdsec", srv.URL + "/crowdsec/"} {
		_, err := client(t, base).Pull(context.Background(), true)
		require.NoError(t, err)
		require.Equal(t, "/crowdsec/v1/decisions/stream", (*reqs)[len(*reqs)-1].URL.Path)
	}
}

// TestPullKeepsLongTextBounded checks origin and scenario are cut when kept.
func TestPullKeepsLongTextBounded(t *testing.T) {
	long := strings.Repeat("é", 40000) // 80,000 bytes: over MaxDecisionBytes
	srv, _ := serve(t, `{"new":[{"duration":"1h","id":1,"origin":"`+long[:30000]+`","scenario":"`+long[:20001]+`","scope":"Ip","type":"ban","value":"192.0.2.1"}]}`)
	d, err := client(t, srv.URL).Pull(context.Background(), true)
	require.NoError(t, err)
	require.Len(t, d.New, 1)
	require.Equal(t, strings.Repeat("é", maxKeptText/2), d.New[0].Origin)
	require.Equal(t, strings.Repeat("é", maxKeptText/2), d.New[0].Scenario)
}

// countingReader counts what the decoder took from the server's body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestDecodeReadsNoMoreThanOneElement checks a huge element is refused after
// at most one element's bound is read, whatever the server sends.
func TestDecodeReadsNoMoreThanOneElement(t *testing.T) {
	huge := strings.Repeat("a", 10<<20)
	cases := map[string]string{
		"huge value":       `{"new":[{"duration":"1h","id":1,"scope":"Ip","type":"ban","value":"` + huge + `"}]}`,
		"huge key":         `{"` + huge + `":1}`,
		"huge unknown key": `{"future":"` + huge + `"}`,
		"huge number":      `{"new":[{"id":` + strings.Repeat("1", 10<<20) + `}]}`,
	}
	c := client(t, "http://127.0.0.1:1/")
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			cr := &countingReader{r: strings.NewReader(body)}
			_, err := c.decode(cr, true)
			require.ErrorIs(t, err, ErrDecisionTooLarge)
			require.Contains(t, err.Error(), fmt.Sprintf("an element over %d bytes", MaxDecisionBytes))
			require.LessOrEqual(t, cr.n, int64(MaxDecisionBytes+2*readAhead), "bytes read before refusing")
		})
	}
}

// TestDecodeDeepNesting checks nesting deeper than JSON decoders allow is
// refused early, and a deep but valid element is one malformed decision.
func TestDecodeDeepNesting(t *testing.T) {
	c := client(t, "http://127.0.0.1:1/")
	cr := &countingReader{r: strings.NewReader(`{"new":[` + strings.Repeat("[", 10<<20))}
	_, err := c.decode(cr, true)
	require.EqualError(t, err, "answer is not valid JSON at offset 10006: invalid character '[' exceeded max depth; is url the LAPI's address?")
	require.LessOrEqual(t, cr.n, int64(MaxDecisionBytes+2*readAhead), "bytes read before refusing")

	deep := strings.Repeat("[", 5000) + "1" + strings.Repeat("]", 5000)
	d, err := c.decode(strings.NewReader(`{"new":[`+deep+`,{"duration":"1h","id":1,"scope":"Ip","type":"ban","value":"192.0.2.1","x":`+deep+`}]}`), true)
	require.NoError(t, err)
	require.Len(t, d.New, 1)
	require.Equal(t, map[Reason]int{IgnoredMalformed: 1}, d.Ignored)
}

// TestPullBadAnswers checks each kind of bad answer ends in its error, exactly.
func TestPullBadAnswers(t *testing.T) {
	cases := []struct {
		name, contentType, body, want string
	}{
		{"garbage", "application/json", "garbage\x00\xff", "is not valid JSON at offset 1: invalid character 'g' looking for beginning of value; is url the LAPI's address?"},
		{"html", "text/html; charset=utf-8", "<html><body>It works!</body></html>", `answered Content-Type "text/html; charset=utf-8", not application/json (answer starts "<html><body>It works!</body></html>"); is url the LAPI's address (default port 8080) and not a web server or proxy?`},
		{"html as json", "application/json", "<!DOCTYPE html>", "answer is not valid JSON at offset 1: invalid character '<' looking for beginning of value"},
		{"no content type", "", `{"new":null}`, `answered Content-Type "", not application/json`},
		{"empty body", "application/json", "", "answer ends early at offset 0: EOF"},
		{"truncated", "application/json", `{"new":[{"id":1,"scope":"Ip"`, "answer ends early"},
		{"array", "application/json", `[{"id":1}]`, `answer is not the decisions stream: expected "{", got "["; is url the LAPI's address?`},
		{"null", "application/json", `null`, `answer is not the decisions stream: expected "{", got null`},
		{"new not a list", "application/json", `{"new":{"id":1}}`, `answer is not the decisions stream: a list of decisions expected, got "{"`},
		{"new a string", "application/json", `{"new":"x"}`, `answer is not the decisions stream: a list of decisions expected, got a string`},
		{"other json", "application/json", `{"message":"hello"}`, `answer is not the decisions stream: neither "new" nor "deleted" in it; is url the LAPI's address?`},
		{"future key", "application/json", `{"new":null,"future":{"x":[1]}}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = []string{tc.contentType}
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			d, err := client(t, srv.URL).Pull(context.Background(), true)
			if tc.want == "" {
				// An unknown key is a newer LAPI's field: skipped.
				require.NoError(t, err)
				require.Equal(t, Delta{Startup: true}, d)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "crowdsec LAPI "+srv.URL+": ")
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), testKey)
		})
	}
}

// TestPull10MBOfDecisions checks a 10 MB answer of valid decisions is read
// whole under the count bound and refused over it.
func TestPull10MBOfDecisions(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"new":[`)
	n := 0
	for b.Len() < 10<<20 {
		if n > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"duration":"1h","id":%d,"origin":"lists","scenario":"firehol","scope":"Ip","type":"ban","value":"10.%d.%d.%d"}`, n, n>>16&255, n>>8&255, n&255)
		n++
	}
	b.WriteString(`],"deleted":null}`)
	srv, _ := serve(t, b.String())

	d, err := client(t, srv.URL, func(c *Config) { c.MaxDecisions = n }).Pull(context.Background(), true)
	require.NoError(t, err)
	require.Len(t, d.New, n)
	require.Equal(t, pfx(fmt.Sprintf("10.%d.%d.%d/32", (n-1)>>16&255, (n-1)>>8&255, (n-1)&255)), d.New[n-1].Prefix)

	_, err = client(t, srv.URL, func(c *Config) { c.MaxDecisions = n - 1 }).Pull(context.Background(), true)
	require.ErrorIs(t, err, ErrTooManyDecisions)
	require.Contains(t, err.Error(), fmt.Sprintf("too many decisions: more than %d in one answer", n-1))
}

// TestPullCountBoundCountsIgnored checks ignored decisions count toward MaxDecisions.
func TestPullCountBoundCountsIgnored(t *testing.T) {
	srv, _ := serve(t, `{"new":[{"scope":"Country","value":"FR"},{"scope":"Country","value":"DE"}],"deleted":[{"scope":"AS","value":"1"},{"scope":"AS","value":"2"}]}`)
	_, err := client(t, srv.URL, func(c *Config) { c.MaxDecisions = 3 }).Pull(context.Background(), false)
	require.ErrorIs(t, err, ErrTooManyDecisions)
	d, err := client(t, srv.URL, func(c *Config) { c.MaxDecisions = 4 }).Pull(context.Background(), false)
	require.NoError(t, err)
	require.Equal(t, map[Reason]int{IgnoredScope: 4}, d.Ignored)
}

// TestPullSlowEndpoint checks the time bound holds both before the headers and across a trickled body.
func TestPullSlowEndpoint(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	slowHeaders := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slowHeaders.Close()
	trickle := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"new":[`)
		for {
			w.(http.Flusher).Flush()
			select {
			case <-release:
				return
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
				_, _ = io.WriteString(w, " ")
			}
		}
	}))
	defer trickle.Close()
	for _, srv := range []*httptest.Server{slowHeaders, trickle} {
		c := client(t, srv.URL, func(c *Config) { c.Timeout = 300 * time.Millisecond })
		_, err := c.Pull(context.Background(), true)
		require.EqualError(t, err, "crowdsec LAPI "+srv.URL+": no complete answer within 300ms; is the LAPI overloaded or the network slow? (timeout)")
	}
}

// TestPullCanceled checks the caller's cancel ends a pull and says so.
func TestPullCanceled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := client(t, srv.URL).Pull(ctx, true)
	require.ErrorIs(t, err, context.Canceled)
}

func TestErrKeyRefusedIsDistinct(t *testing.T) {
	require.False(t, errors.Is(ErrKeyRefused, ErrTooManyDecisions))
}

// TestPullStartupSkipsDeleted: a full list's deleted (the expired decisions
// the LAPI keeps for days) is neither kept nor counted toward MaxDecisions:
// 1 decision in force beside 3,000 expired syncs under a bound of 2; a
// delta's deleted still counts and is kept.
func TestPullStartupSkipsDeleted(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"new":[{"duration":"1h","id":1,"scope":"Ip","type":"ban","value":"198.51.100.7"}],"deleted":[`)
	for i := range 3000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"duration":"-1s","id":%d,"scope":"Ip","type":"ban","value":"10.%d.%d.1"}`, i+2, i/250, i%250)
	}
	b.WriteString(`]}`)
	srv, _ := serve(t, b.String())
	c := client(t, srv.URL, func(c *Config) { c.MaxDecisions = 2 })
	d, err := c.Pull(context.Background(), true)
	require.NoError(t, err)
	require.Len(t, d.New, 1)
	require.Empty(t, d.Deleted)
	require.Empty(t, d.Ignored)
	_, err = c.Pull(context.Background(), false)
	require.ErrorIs(t, err, ErrTooManyDecisions)
	require.ErrorContains(t, err, "too many decisions: more than 2 in one answer; the LAPI holds more decisions in force than the bound (twice bans.max): raise max")
	d, err = client(t, srv.URL, func(c *Config) { c.MaxDecisions = 3001 }).Pull(context.Background(), false)
	require.NoError(t, err)
	require.Len(t, d.Deleted, 3000)
}
