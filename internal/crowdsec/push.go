package crowdsec

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// ErrLoginRefused is wrapped by Push's error when the LAPI refuses the
// machine's login and password.
var ErrLoginRefused = errors.New("machine login refused")

// AlertError is Push's error when the LAPI answered the post of the alert
// itself with an error: it is about this alert, not about the LAPI's
// reach or the machine's login (those errors are of other types).
type AlertError struct {
	Status int // the answer's HTTP status
	msg    string
}

func (e *AlertError) Error() string { return e.msg }

// Refused reports an answer that posting the same alert again will not
// change: a 4xx other than 401 (the machine's token, renewed once
// already), 408 and 429 (the LAPI busy).
func (e *AlertError) Refused() bool {
	switch e.Status {
	case http.StatusUnauthorized, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return e.Status >= 400 && e.Status < 500
}

// DefaultScenario names the alerts a Pusher posts.
const DefaultScenario = "xdp-drop/detect"

// PushConfig configures a Pusher: a CrowdSec machine (watcher) that posts
// alerts, each with one ban decision, to a LAPI.
type PushConfig struct {
	// URL is the LAPI's base URL, as Config.URL.
	URL string
	// Login and Password are the machine's (cscli machines add <login>
	// --password ...).
	Login, Password string
	// Scenario names the alerts; empty means DefaultScenario.
	Scenario string
	// ScenarioVersion is the alerts' scenario_version (the version of
	// what decides the bans); empty means UserAgent's version.
	ScenarioVersion string
	// TLS is used for https URLs; nil means Go's defaults.
	TLS *tls.Config
	// Timeout bounds one request; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent as Config.UserAgent.
	UserAgent string
}

// Ban is one ban to share: a source prefix, banned from Start for
// Duration, with what decided it.
type Ban struct {
	Prefix   netip.Prefix
	Start    time.Time
	Duration time.Duration
	// Message says why; Evidence is what decided it, the meta of the
	// alert's one event, in order (as an agent's event carries the fields
	// of the log line that made it), after the source's own.
	Message  string
	Evidence []Meta
}

// Meta is one key and value of an alert's event.
type Meta struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Pusher posts bans to a LAPI as a machine: it logs in (POST
// /v1/watchers/login) for a token, logs in again when the token is
// refused, and posts each ban as an alert (POST /v1/alerts) as CrowdSec's
// agents do, so every bouncer of the LAPI gets it in its stream. It is
// safe for use by one goroutine at a time.
type Pusher struct {
	cfg    PushConfig
	login  string // <url>/v1/watchers/login
	alerts string // <url>/v1/alerts
	shown  string
	http   *http.Client
	mu     sync.Mutex
	token  string
}

// NewPusher validates cfg; it makes no request.
func NewPusher(cfg PushConfig) (*Pusher, error) {
	u, err := url.Parse(cfg.URL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("crowdsec url %s: %v", quote.Value(redactURL(cfg.URL)), unwrapURLError(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("crowdsec url %s: scheme must be http or https", quote.Value(showURL(u)))
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("crowdsec url %s: give the LAPI's base address, e.g. http://127.0.0.1:8080/", quote.Value(showURL(u)))
	case cfg.Login == "" || strings.ContainsAny(cfg.Login, " \t\r\n"):
		return nil, fmt.Errorf("crowdsec machine login %s: empty or holds a space; add the machine with 'cscli machines add <login> --password ...'", quote.Value(cfg.Login))
	case cfg.Password == "":
		return nil, errors.New("crowdsec machine password: empty; write the password given to 'cscli machines add'")
	}
	if cfg.Scenario == "" {
		cfg.Scenario = DefaultScenario
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.ScenarioVersion == "" {
		_, cfg.ScenarioVersion, _ = strings.Cut(cfg.UserAgent, "/")
	}
	base := strings.TrimSuffix(u.Path, "/")
	at := func(p string) string {
		v := *u
		v.Path, v.RawPath = base+"/"+p, ""
		return v.String()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS.Clone()
	}
	return &Pusher{
		cfg: cfg, login: at("v1/watchers/login"), alerts: at("v1/alerts"), shown: showURL(u),
		http: &http.Client{Transport: tr, Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}, nil
}

// Push posts b as an alert with one ban decision and returns the alert's
// id; a refused token is renewed once.
func (p *Pusher) Push(ctx context.Context, b Ban) (string, error) {
	body, err := json.Marshal([]alert{p.alertOf(b)})
	if err != nil {
		return "", fmt.Errorf("crowdsec push: encode the alert: %w", err)
	}
	for try := 0; ; try++ {
		token, err := p.tokenFor(ctx, try > 0)
		if err != nil {
			return "", err
		}
		id, status, err := p.post(ctx, token, body)
		if status == http.StatusUnauthorized && try == 0 {
			continue // the token expired: log in again
		}
		return id, err
	}
}

// tokenFor is the machine's token, logging in when there is none or fresh.
func (p *Pusher) tokenFor(ctx context.Context, fresh bool) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token != "" && !fresh {
		return p.token, nil
	}
	p.token = ""
	in, _ := json.Marshal(map[string]any{"machine_id": p.cfg.Login, "password": p.cfg.Password, "scenarios": []string{p.cfg.Scenario}})
	resp, err := p.do(ctx, p.login, "", in)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return "", fmt.Errorf("crowdsec LAPI %s: %w for %s (HTTP %d)%s; add the machine on the LAPI host with 'cscli machines add %s --password ...' and write that password to crowdsec_password_file", p.shown, ErrLoginRefused, quote.Value(p.cfg.Login), resp.StatusCode, bodyHint(resp.Body, p.cfg.Password, "[password]"), p.cfg.Login)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("crowdsec LAPI %s: login: HTTP %s%s", p.shown, resp.Status, bodyHint(resp.Body, p.cfg.Password, "[password]"))
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil || out.Token == "" {
		return "", fmt.Errorf("crowdsec LAPI %s: login answered no token; is url the LAPI's address?", p.shown)
	}
	p.token = out.Token
	return p.token, nil
}

// post posts body to the alerts endpoint; status is the answer's.
func (p *Pusher) post(ctx context.Context, token string, body []byte) (string, int, error) {
	resp, err := p.do(ctx, p.alerts, token, body)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", resp.StatusCode, &AlertError{Status: resp.StatusCode, msg: fmt.Sprintf("crowdsec LAPI %s: post the alert: HTTP %s%s", p.shown, resp.Status, bodyHint(resp.Body, p.cfg.Password, "[password]"))}
	}
	var ids []string
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&ids); err != nil || len(ids) != 1 {
		return "", resp.StatusCode, &AlertError{Status: resp.StatusCode, msg: fmt.Sprintf("crowdsec LAPI %s: post the alert: the answer is not one alert id", p.shown)}
	}
	return ids[0], resp.StatusCode, nil
}

func (p *Pusher) do(ctx context.Context, to, token string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("crowdsec LAPI %s: %w", p.shown, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", p.cfg.UserAgent)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		c := Client{shown: p.shown, cfg: Config{Timeout: p.cfg.Timeout}}
		return nil, c.transportError(ctx, err)
	}
	return resp, nil
}

// alert is the LAPI's Alert as an agent posts it (models.Alert, 1.4).
// The LAPI sets machine_id to the login of the token that posts it.
type alert struct {
	MachineID       string         `json:"machine_id"`
	Scenario        string         `json:"scenario"`
	ScenarioHash    string         `json:"scenario_hash"`
	ScenarioVersion string         `json:"scenario_version"`
	Message         string         `json:"message"`
	EventsCount     int32          `json:"events_count"`
	StartAt         string         `json:"start_at"`
	StopAt          string         `json:"stop_at"`
	Capacity        int32          `json:"capacity"`
	Leakspeed       string         `json:"leakspeed"`
	Simulated       bool           `json:"simulated"`
	Remediation     bool           `json:"remediation"`
	Events          []event        `json:"events"`
	Decisions       []wireDecision `json:"decisions"`
	Source          source         `json:"source"`
}

type event struct {
	Timestamp string `json:"timestamp"`
	Meta      []Meta `json:"meta"`
}

type source struct {
	Scope string `json:"scope"`
	Value string `json:"value"`
	IP    string `json:"ip,omitempty"`
	Range string `json:"range,omitempty"`
}

// alertOf is b as the LAPI takes it: scope Ip for one address, Range
// otherwise; one event, whose meta is the source and the evidence.
func (p *Pusher) alertOf(b Ban) alert {
	pfx := b.Prefix.Masked()
	src := source{Scope: "Range", Value: pfx.String(), Range: pfx.String()}
	first := Meta{Key: "source_range", Value: src.Value}
	if pfx.IsSingleIP() {
		src = source{Scope: "Ip", Value: pfx.Addr().String(), IP: pfx.Addr().String()}
		first = Meta{Key: "source_ip", Value: src.Value}
	}
	start := b.Start.UTC().Format(time.RFC3339)
	events := []event{{Timestamp: start, Meta: append([]Meta{first}, b.Evidence...)}}
	return alert{
		MachineID: p.cfg.Login,
		Scenario:  p.cfg.Scenario, ScenarioHash: "", ScenarioVersion: p.cfg.ScenarioVersion,
		Message:     b.Message,
		EventsCount: int32(len(events)),
		StartAt:     start, StopAt: start,
		Leakspeed: "0s", Remediation: true,
		Events: events,
		Decisions: []wireDecision{{
			Origin: "crowdsec", Type: "ban", Scope: src.Scope, Value: src.Value,
			Duration: b.Duration.Round(time.Second).String(), Scenario: p.cfg.Scenario,
		}},
		Source: src,
	}
}
