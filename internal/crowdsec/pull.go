package crowdsec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// streamPath is the bouncer stream's path under the LAPI URL.
const streamPath = "v1/decisions/stream"

func newClient(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("crowdsec url %s: %v; set url to the LAPI address, e.g. http://127.0.0.1:8080/", quote.Value(redactURL(cfg.URL)), unwrapURLError(err))
	}
	shown := showURL(u)
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("crowdsec url %s: scheme must be http or https; set url to the LAPI address, e.g. http://127.0.0.1:8080/", quote.Value(shown))
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("crowdsec url %s: no host; set url to the LAPI address, e.g. http://127.0.0.1:8080/", quote.Value(shown))
	case u.User != nil:
		return nil, fmt.Errorf("crowdsec url %s: user info is not used by the LAPI; remove it and set api_key", quote.Value(shown))
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, fmt.Errorf("crowdsec url %s: a query or fragment is not allowed; set url to the LAPI's base address", quote.Value(shown))
	}
	if err := checkKey(cfg.APIKey); err != nil {
		return nil, err
	}
	if cfg.MaxDecisions < 0 {
		return nil, fmt.Errorf("crowdsec max decisions %d: must not be negative", cfg.MaxDecisions)
	}
	if cfg.MaxDecisions == 0 {
		cfg.MaxDecisions = DefaultMaxDecisions
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("crowdsec timeout %s: must not be negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if name, version, ok := strings.Cut(cfg.UserAgent, "/"); !ok || name == "" || version == "" || strings.Contains(version, "/") || strings.ContainsAny(cfg.UserAgent, " \t\r\n") {
		return nil, fmt.Errorf("crowdsec user agent %s: must be name/version with one slash and no spaces, e.g. xdp-drop/1.2.3 (the LAPI records it as the bouncer's type and version)", quote.Value(cfg.UserAgent))
	}
	types := make(map[string]bool)
	for _, t := range cfg.Types {
		t = strings.ToLower(strings.TrimSpace(t))
		if t == "" {
			return nil, errors.New(`crowdsec types: an empty type; list decision types such as "ban"`)
		}
		types[t] = true
	}
	if len(types) == 0 {
		types["ban"] = true
	}

	endpoint := *u
	endpoint.Path = strings.TrimSuffix(u.Path, "/") + "/" + streamPath
	endpoint.RawPath = ""

	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS.Clone()
	}
	// One pull at a time: keep the one connection the poller reuses.
	tr.MaxIdleConnsPerHost = 1
	return &Client{
		cfg:      cfg,
		endpoint: endpoint.String(),
		shown:    shown,
		types:    types,
		http: &http.Client{
			Transport: tr,
			// A redirect would carry X-Api-Key to wherever it points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// minKeyPart is the shortest start of the key an error's cut text is
// searched for: shorter ones match ordinary text too often to tell.
const minKeyPart = 8

// checkKey refuses a key the header cannot carry, or that quoting would
// change (so that no redaction misses it), without echoing it.
func checkKey(key string) error {
	if key == "" {
		return errors.New("crowdsec api key: empty; create one on the LAPI host with 'cscli bouncers add <name>' and set api_key or api_key_file")
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			return fmt.Errorf("crowdsec api key: byte %d of %d is a space, control or non-ASCII character; set the key exactly as 'cscli bouncers add' printed it (a trailing newline in api_key_file is trimmed by the caller)", i+1, len(key))
		}
		if key[i] == '"' || key[i] == '\\' {
			return fmt.Errorf("crowdsec api key: byte %d of %d is a quote or a backslash, which errors would escape (and so could not redact); give the bouncer a key of letters and digits ('cscli bouncers add <name>' makes one)", i+1, len(key))
		}
	}
	return nil
}

// showURL is u as errors show it: no user info, no query, no fragment.
func showURL(u *url.URL) string {
	v := *u
	v.User = nil
	v.RawQuery = ""
	v.ForceQuery = false
	v.Fragment = ""
	v.RawFragment = ""
	return v.String()
}

// redactURL shows a URL that does not parse without what may be secret in it.
func redactURL(s string) string {
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			s = s[:j+3] + "…@" + s[i+1:]
		}
	}
	return s
}

func (c *Client) pull(ctx context.Context, startup bool) (Delta, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	d, err := c.fetch(ctx, startup)
	if err != nil {
		// Last guard: whatever the server echoed, the key never leaves in an error.
		return Delta{}, redactKey(err, c.cfg.APIKey)
	}
	return d, nil
}

func (c *Client) fetch(ctx context.Context, startup bool) (Delta, error) {
	q := "?startup=false"
	if startup {
		q = "?startup=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint+q, nil)
	if err != nil {
		return Delta{}, fmt.Errorf("crowdsec LAPI %s: %v", c.shown, unwrapURLError(err))
	}
	req.Header.Set("X-Api-Key", c.cfg.APIKey)
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return Delta{}, c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if err := c.checkResponse(resp); err != nil {
		return Delta{}, err
	}
	d, err := c.decode(resp.Body, startup)
	if err != nil {
		if ctx.Err() != nil {
			return Delta{}, c.transportError(ctx, err)
		}
		return Delta{}, fmt.Errorf("crowdsec LAPI %s: %w", c.shown, err)
	}
	return d, nil
}

func (c *Client) checkResponse(resp *http.Response) error {
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("crowdsec LAPI %s: %w (HTTP %d); create a bouncer key on the LAPI host with 'cscli bouncers add <name>' and set api_key or api_key_file to it", c.shown, ErrKeyRefused, resp.StatusCode)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc := resp.Header.Get("Location")
		if u, err := url.Parse(loc); err == nil {
			loc = showURL(u)
		} else {
			loc = redactURL(loc)
		}
		return fmt.Errorf("crowdsec LAPI %s: redirected (HTTP %d) to %s, which is not followed; set url to the LAPI's own address", c.shown, resp.StatusCode, quote.Value(loc))
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("crowdsec LAPI %s: HTTP %s%s; check the LAPI's log", c.shown, resp.Status, c.bodyHint(resp.Body))
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("crowdsec LAPI %s: answered Content-Type %s, not application/json%s; is url the LAPI's address (default port 8080) and not a web server or proxy?", c.shown, quote.Value(ct), c.bodyHint(resp.Body))
	}
	return nil
}

// hintBytes is how much of an unexpected answer an error shows.
const hintBytes = 120

// bodyHint quotes the start of an unexpected answer so the operator sees
// what answered. A proxy may echo the request: the key is redacted in the
// raw bytes, before they are cut or quoted (which would hide it from a
// later search), and a start of the key at the cut is dropped.
func (c *Client) bodyHint(r io.Reader) string {
	return bodyHint(r, c.cfg.APIKey, "[api key]")
}

// bodyHint is Client.bodyHint for any secret, shown as mask.
func bodyHint(r io.Reader, secret, mask string) string {
	b, _ := io.ReadAll(io.LimitReader(r, int64(hintBytes+len(secret))))
	text := string(b)
	if secret != "" {
		text = strings.ReplaceAll(text, secret, mask)
	}
	if len(text) > hintBytes {
		text = text[:hintBytes]
	}
	for n := min(len(secret)-1, len(text)); n >= minKeyPart; n-- {
		if strings.HasSuffix(text, secret[:n]) {
			text = text[:len(text)-n] + mask
			break
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(text, "?"))
	if s == "" {
		return ""
	}
	return fmt.Sprintf(" (answer starts %s)", quote.Value(s))
}

// transportError says what failed in reaching the LAPI and what to do,
// without url.Error's text, which carries the query.
func (c *Client) transportError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("crowdsec LAPI %s: no complete answer within %s; is the LAPI overloaded or the network slow? (timeout)", c.shown, c.cfg.Timeout)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("crowdsec LAPI %s: %w", c.shown, context.Canceled)
	}
	inner := unwrapURLError(err)
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		recordHdr tls.RecordHeaderError
		dnsErr    *net.DNSError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("crowdsec LAPI %s: connection refused; is the LAPI running and listening there (api.server.listen_uri in crowdsec's config.yaml)?", c.shown)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("crowdsec LAPI %s: TLS: %v; set tls_ca to the CA that signed the LAPI's certificate", c.shown, inner)
	case errors.As(err, &hostname):
		return fmt.Errorf("crowdsec LAPI %s: TLS: %v; use the host name the certificate names in url", c.shown, inner)
	case errors.As(err, &invalid):
		return fmt.Errorf("crowdsec LAPI %s: TLS: %v; renew the LAPI's certificate or fix the host's clock", c.shown, inner)
	// net/http turns the handshake's record error into an untyped text.
	case errors.As(err, &recordHdr) || strings.Contains(inner.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("crowdsec LAPI %s: TLS handshake got no TLS answer; the LAPI serves plain HTTP there: use an http:// url", c.shown)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("crowdsec LAPI %s: %v; check the host name in url", c.shown, inner)
	}
	return fmt.Errorf("crowdsec LAPI %s: %v", c.shown, inner)
}

// unwrapURLError drops url.Error's wrapper, whose text holds the full URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// keyRedacted is an error whose text had the key replaced.
type keyRedacted struct {
	msg string
	err error
}

func (e *keyRedacted) Error() string { return e.msg }
func (e *keyRedacted) Unwrap() error { return e.err }

func redactKey(err error, key string) error {
	msg := err.Error()
	if key == "" || !strings.Contains(msg, key) {
		return err
	}
	// Keep only our sentinels in the chain: an inner error's text may hold the key.
	var kept error
	for _, s := range []error{ErrKeyRefused, ErrTooManyDecisions, ErrDecisionTooLarge} {
		if errors.Is(err, s) {
			kept = s
		}
	}
	return &keyRedacted{msg: strings.ReplaceAll(msg, key, "[api key]"), err: kept}
}
