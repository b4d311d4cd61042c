package crowdsec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewRefusesBadConfig checks each bad option gets an error naming it and what to do, never the key.
func TestNewRefusesBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"empty url", Config{URL: "", APIKey: testKey}, `crowdsec url "": scheme must be http or https; set url to the LAPI address, e.g. http://127.0.0.1:8080/`},
		{"no scheme", Config{URL: "127.0.0.1:8080", APIKey: testKey}, `crowdsec url "127.0.0.1:8080": first path segment in URL cannot contain colon; set url to the LAPI address, e.g. http://127.0.0.1:8080/`},
		{"ftp", Config{URL: "ftp://lapi/", APIKey: testKey}, `crowdsec url "ftp://lapi/": scheme must be http or https; set url to the LAPI address, e.g. http://127.0.0.1:8080/`},
		{"no host", Config{URL: "http:///v1", APIKey: testKey}, `crowdsec url "http:///v1": no host; set url to the LAPI address, e.g. http://127.0.0.1:8080/`},
		{"port only", Config{URL: "http://:8080/", APIKey: testKey}, `crowdsec url "http://:8080/": no host; set url to the LAPI address, e.g. http://127.0.0.1:8080/`},
		{"user info", Config{URL: "http://bob:" + testKey + "@lapi:8080/", APIKey: testKey}, `crowdsec url "http://lapi:8080/": user info is not used by the LAPI; remove it and set api_key`},
		{"query", Config{URL: "http://lapi:8080/?api_key=" + testKey, APIKey: testKey}, `crowdsec url "http://lapi:8080/": a query or fragment is not allowed; set url to the LAPI's base address`},
		{"bad escape with secret", Config{URL: "http://bob:" + testKey + "@lapi:8080/%zz?k=" + testKey, APIKey: testKey}, `crowdsec url "http://…@lapi:8080/%zz": invalid URL escape "%zz"; set url to the LAPI address, e.g. http://127.0.0.1:8080/`},
		{"empty key", Config{URL: "http://lapi:8080/"}, "crowdsec api key: empty; create one on the LAPI host with 'cscli bouncers add <name>' and set api_key or api_key_file"},
		{"key with newline", Config{URL: "http://lapi:8080/", APIKey: testKey + "\n"}, "crowdsec api key: byte 30 of 30 is a space, control or non-ASCII character; set the key exactly as 'cscli bouncers add' printed it (a trailing newline in api_key_file is trimmed by the caller)"},
		{"negative max", Config{URL: "http://lapi:8080/", APIKey: testKey, MaxDecisions: -1}, "crowdsec max decisions -1: must not be negative"},
		{"negative timeout", Config{URL: "http://lapi:8080/", APIKey: testKey, Timeout: -1}, "crowdsec timeout -1ns: must not be negative"},
		{"user agent without version", Config{URL: "http://lapi:8080/", APIKey: testKey, UserAgent: "xdp-drop"}, `crowdsec user agent "xdp-drop": must be name/version with one slash and no spaces, e.g. xdp-drop/1.2.3 (the LAPI records it as the bouncer's type and version)`},
		{"user agent two slashes", Config{URL: "http://lapi:8080/", APIKey: testKey, UserAgent: "xdp-drop/1/2"}, `crowdsec user agent "xdp-drop/1/2": must be name/version with one slash and no spaces, e.g. xdp-drop/1.2.3 (the LAPI records it as the bouncer's type and version)`},
		{"empty type", Config{URL: "http://lapi:8080/", APIKey: testKey, Types: []string{"ban", " "}}, `crowdsec types: an empty type; list decision types such as "ban"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			require.EqualError(t, err, tc.want)
			require.NotContains(t, err.Error(), testKey)
		})
	}
}

// TestPullStatuses checks refused keys, redirects and server errors end in errors saying what to do.
func TestPullStatuses(t *testing.T) {
	var elsewhere int
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere++ }))
	defer other.Close()
	cases := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   string
	}{
		{"401", 401, nil, `{"message":"access forbidden"}`, ": bouncer API key refused (HTTP 401); create a bouncer key on the LAPI host with 'cscli bouncers add <name>' and set api_key or api_key_file to it"},
		{"403", 403, nil, `{"message":"access forbidden"}`, ": bouncer API key refused (HTTP 403); create a bouncer key on the LAPI host with 'cscli bouncers add <name>' and set api_key or api_key_file to it"},
		{"500", 500, nil, `{"message":"database is locked"}`, `: HTTP 500 Internal Server Error (answer starts "{\"message\":\"database is locked\"}"); check the LAPI's log`},
		{"502 empty", 502, nil, ``, `: HTTP 502 Bad Gateway; check the LAPI's log`},
		{"404", 404, nil, `404 page not found`, `: HTTP 404 Not Found (answer starts "404 page not found"); check the LAPI's log`},
		{"redirect", 302, map[string]string{"Location": other.URL + "/steal?k=v"}, ``, `: redirected (HTTP 302) to "` + other.URL + `/steal", which is not followed; set url to the LAPI's own address`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			_, err := client(t, srv.URL).Pull(context.Background(), true)
			require.EqualError(t, err, "crowdsec LAPI "+srv.URL+tc.want)
			if tc.status == 401 || tc.status == 403 {
				require.ErrorIs(t, err, ErrKeyRefused)
			} else {
				require.NotErrorIs(t, err, ErrKeyRefused)
			}
		})
	}
	require.Zero(t, elsewhere, "requests that followed the redirect, carrying the key")
}

// TestPullNeverEchoesTheKey checks a server echoing the request (headers, URL)
// into its answer does not get the key into the error.
func TestPullNeverEchoesTheKey(t *testing.T) {
	for _, status := range []int{200, 403, 500} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "key="+r.Header.Get("X-Api-Key")+" url="+r.URL.String())
		}))
		_, err := client(t, srv.URL).Pull(context.Background(), true)
		srv.Close()
		require.Error(t, err)
		require.NotContains(t, err.Error(), testKey)
		if status == 403 {
			require.ErrorIs(t, err, ErrKeyRefused)
		} else {
			// The answer is quoted in the error, with the key blotted out.
			require.Contains(t, err.Error(), "key=[api key] url=/v1/decisions/stream?startup=true")
		}
	}
}

// TestPullConnectionRefused checks a LAPI that is down is named, with what to do.
func TestPullConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/"
	ln.Close()
	_, err = client(t, url).Pull(context.Background(), true)
	require.EqualError(t, err, "crowdsec LAPI "+url+": connection refused; is the LAPI running and listening there (api.server.listen_uri in crowdsec's config.yaml)?")
}

// TestPullUnknownHost checks a host name that does not resolve is named.
func TestPullUnknownHost(t *testing.T) {
	_, err := client(t, "http://lapi.invalid:8080/").Pull(context.Background(), true)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "crowdsec LAPI http://lapi.invalid:8080/: dial tcp: lookup lapi.invalid"), err.Error())
	require.True(t, strings.HasSuffix(err.Error(), "; check the host name in url"), err.Error())
	require.NotContains(t, err.Error(), "startup=")
}

// TestPullTLS checks https with an unknown CA, the right CA, and https to a plain HTTP LAPI.
func TestPullTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"new":[{"duration":"1h","id":1,"scope":"Ip","type":"ban","value":"192.0.2.1"}],"deleted":null}`)
	}))
	// The handshakes this test fails on purpose are not worth the server's log lines.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()

	_, err := client(t, srv.URL).Pull(context.Background(), true)
	require.EqualError(t, err, "crowdsec LAPI "+srv.URL+": TLS: tls: failed to verify certificate: x509: certificate signed by unknown authority; set tls_ca to the CA that signed the LAPI's certificate")

	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	d, err := client(t, srv.URL, func(c *Config) { c.TLS = &tls.Config{RootCAs: pool} }).Pull(context.Background(), true)
	require.NoError(t, err)
	require.Len(t, d.New, 1)

	// The certificate names 127.0.0.1 and example.com, not localhost.
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	_, err = client(t, byName, func(c *Config) { c.TLS = &tls.Config{RootCAs: pool} }).Pull(context.Background(), true)
	require.EqualError(t, err, "crowdsec LAPI "+byName+": TLS: tls: failed to verify certificate: x509: certificate is valid for example.com, *.example.com, not localhost; use the host name the certificate names in url")

	plain, _ := serve(t, `{}`)
	https := strings.Replace(plain.URL, "http://", "https://", 1)
	_, err = client(t, https).Pull(context.Background(), true)
	require.EqualError(t, err, "crowdsec LAPI "+https+": TLS handshake got no TLS answer; the LAPI serves plain HTTP there: use an http:// url")
}

// TestClientURL checks URL shows what errors show.
func TestClientURL(t *testing.T) {
	require.Equal(t, "https://lapi:8080/base/", client(t, "https://lapi:8080/base/").URL())
}

// TestBodyHintNeverShowsTheKey: an answer that echoes the key (a proxy, a
// wrong url) is shown without it, whole or cut at the hint's end; a key
// that quoting would change is refused at New.
func TestBodyHintNeverShowsTheKey(t *testing.T) {
	const key = "Zk3v9QpL2mX8rT4wY6bN1cD5fG7hJ0sA"
	for _, pad := range []int{0, 60, 100, 110, 119, 130} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, strings.Repeat(".", pad)+r.Header.Get("X-Api-Key")+" tail")
		}))
		c, err := New(Config{URL: srv.URL, APIKey: key})
		require.NoError(t, err)
		_, err = c.Pull(context.Background(), true)
		srv.Close()
		require.Error(t, err)
		for n := minKeyPart; n <= len(key); n++ {
			require.NotContains(t, err.Error(), key[:n], "pad %d", pad)
		}
		if pad < hintBytes-minKeyPart {
			require.Contains(t, err.Error(), "[api key]", "pad %d", pad)
		}
	}
	for _, bad := range []string{`ab"cd` + key, `ab\cd` + key} {
		_, err := New(Config{URL: "http://127.0.0.1:8080/", APIKey: bad})
		require.EqualError(t, err, "crowdsec api key: byte 3 of 37 is a quote or a backslash, which errors would escape (and so could not redact); give the bouncer a key of letters and digits ('cscli bouncers add <name>' makes one)")
	}
}
