package crowdsec

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"
)

// Defaults for the zero values of Config.
const (
	// DefaultMaxDecisions bounds the decisions of one answer (new and
	// deleted together).
	DefaultMaxDecisions = 200_000
	// DefaultTimeout bounds one pull, from request to last byte.
	DefaultTimeout = 60 * time.Second
	// DefaultUserAgent is sent when Config.UserAgent is empty. The LAPI
	// records "name/version" as the bouncer's type and version, and logs a
	// warning on every pull whose User-Agent is not of that form.
	DefaultUserAgent = "xdp-drop/unknown"
	// MaxDecisionBytes bounds the JSON text of one decision.
	MaxDecisionBytes = 64 << 10
)

// ErrKeyRefused is wrapped by Pull's error when the LAPI answers 401 or 403.
var ErrKeyRefused = errors.New("bouncer API key refused")

// ErrTooManyDecisions is wrapped by Pull's error when an answer holds more
// than Config.MaxDecisions decisions.
var ErrTooManyDecisions = errors.New("too many decisions")

// Config configures a Client.
type Config struct {
	// URL is the LAPI's base URL, http or https, e.g. http://127.0.0.1:8080/.
	URL string
	// APIKey is the bouncer key (cscli bouncers add <name>).
	APIKey string
	// Types are the decision types enforced, compared case-insensitively;
	// empty means ["ban"].
	Types []string
	// TLS is used for https URLs; nil means Go's defaults.
	TLS *tls.Config
	// MaxDecisions bounds the decisions of one answer; 0 means
	// DefaultMaxDecisions.
	MaxDecisions int
	// Timeout bounds one pull; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent is sent as User-Agent: "name/version" with one slash, e.g.
	// "xdp-drop/1.2.3"; empty means DefaultUserAgent.
	UserAgent string
}

// Client pulls the decisions stream of one LAPI. It is safe for use by one
// goroutine at a time.
type Client struct {
	cfg      Config
	endpoint string // <url>/v1/decisions/stream, no query
	shown    string // the URL as errors show it: no user info, no query
	types    map[string]bool
	http     *http.Client
}

// New validates cfg and returns a Client; it makes no request.
func New(cfg Config) (*Client, error) {
	return newClient(cfg)
}

// Pull asks the LAPI for the decisions stream: startup true for the full
// list (the first pull and the one after any failure), false for what
// changed since the previous pull with the same key.
func (c *Client) Pull(ctx context.Context, startup bool) (Delta, error) {
	return c.pull(ctx, startup)
}

// URL returns the LAPI URL as errors show it (no user info, no query).
func (c *Client) URL() string { return c.shown }
