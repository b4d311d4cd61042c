package xdp_drop

import (
	gotls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/common/tls"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// BansConfig is [inputs.xdp_drop.bans]: timed bans of source prefixes,
// checked before the rules, fed by CrowdSec; the kernel decides expiry.
type BansConfig struct {
	AllowPrefix     []string        `toml:"allow_prefix"`
	AllowPrefixFile []string        `toml:"allow_prefix_file"`
	Max             int64           `toml:"max"`
	DryRun          bool            `toml:"dry_run"`
	CrowdSec        *CrowdSecConfig `toml:"crowdsec"`
	Detect          *DetectConfig   `toml:"detect"`
}

// CrowdSecConfig is [inputs.xdp_drop.bans.crowdsec]: a bouncer of a
// CrowdSec Local API, polling its decisions stream.
type CrowdSecConfig struct {
	URL        string          `toml:"url"`
	APIKey     string          `toml:"api_key"`
	APIKeyFile string          `toml:"api_key_file"`
	Interval   config.Duration `toml:"interval"`
	Resync     config.Duration `toml:"resync"`
	Types      []string        `toml:"types"`
	tls.ClientConfig
	// APIKeyVars are the environment variables api_key named ("${NAME}")
	// that were unset or empty when the binary read the config, so that
	// an empty key says which; set by the binary, never by TOML.
	APIKeyVars []EnvVar `toml:"-"`
}

// EnvVar is a variable of the environment a value of the config named.
type EnvVar struct {
	Name string
	Set  bool // set, but empty
}

// emptyVarsError says which variables left api_key empty, and what to do.
func emptyVarsError(vars []EnvVar) error {
	var said []string
	for _, v := range vars {
		state := "unset"
		if v.Set {
			state = "set but empty"
		}
		said = append(said, fmt.Sprintf("the environment variable %s is %s", v.Name, state))
	}
	return fmt.Errorf(`bans.crowdsec.api_key is empty: %s; set it in the environment of Telegraf's service to the key "cscli bouncers add xdp-drop-<host>" printed, or set api_key_file = "/etc/telegraf-xdp-drop/crowdsec.key" instead`, strings.Join(said, ", "))
}

// Bounds and defaults of the bans options.
const (
	DefaultBansMax = bpf.DefaultBanMax
	// allowOnlyBansMax is max's default for [bans] without a feed (with
	// [flowspec]: an allow-list only), as when FlowSpec turns bans on.
	allowOnlyBansMax = 1024
	// MaxBansMax bounds max: ten times the default, 1,000,000 bans a family
	// (the README states the memory it takes).
	MaxBansMax              = 1_000_000
	DefaultCrowdSecInterval = 10 * time.Second
	MinCrowdSecInterval     = 100 * time.Millisecond
	MaxCrowdSecInterval     = time.Hour
	// DefaultCrowdSecResync is how often the full list is pulled again
	// (never more often than interval): a decision the LAPI's deltas
	// missed is banned within it.
	DefaultCrowdSecResync = 15 * time.Minute
	MaxCrowdSecResync     = 24 * time.Hour
	// maxAPIKeyFile bounds api_key_file: a key is a few dozen bytes.
	maxAPIKeyFile = 4096
)

// Keys of the bans options, as errors name them.
const (
	keyBans            = "bans"
	keyAllowPrefix     = "bans.allow_prefix"
	keyAllowPrefixFile = "bans.allow_prefix_file"
	keyBansMax         = "bans.max"
	keyCrowdSec        = "bans.crowdsec"
	keyCrowdSecURL     = "bans.crowdsec.url"
	keyAPIKey          = "bans.crowdsec.api_key"
	keyAPIKeyFile      = "bans.crowdsec.api_key_file"
	keyInterval        = "bans.crowdsec.interval"
	keyResync          = "bans.crowdsec.resync"
	keyTypes           = "bans.crowdsec.types"
	keyTLS             = "bans.crowdsec.tls_ca"
)

// initBans checks the bans options and makes their owner (nil without
// [bans]); the policy's programs get the ban code. The console views
// (Observe, ReadOnly) read the ban counters and the bans in force from the
// kernel but pull no feed, and so need no key: a second puller with the
// same bouncer key would take the deltas of the instance that runs.
func (x *XDPDrop) initBans(policy *bpf.Policy) error {
	x.bans, x.banOpts = nil, nil
	if x.Bans == nil {
		return nil
	}
	uid := x.files.trustedUID()
	view := x.Run.Observe || x.Run.ReadOnly
	set, err := parseBans(x.Bans, x.DryRun, uid, view, x.FlowSpec != nil)
	if x.Bans.Detect != nil && !view {
		var derr error
		set.detect, derr = x.parseDetect(x.Bans.Detect, x.Bans.CrowdSec != nil, uid)
		err = errors.Join(err, derr)
	}
	if err != nil {
		return err
	}
	set.ns, set.resolvConf = x.Namespace, x.Run.ResolvConf
	set.version = lapiVersion(x.Run.Version)
	policy.Bans = bpf.BansConfig{On: true, DryRun: set.dryRun, Max: set.max}
	if view {
		set.viewed = viewedOrigins(x.Bans, set.dryRun)
	}
	settings, err := set.settings()
	if err != nil {
		return err
	}
	b, err := bans.New(settings, x.Log)
	if err != nil {
		return settingError(err)
	}
	x.bans, x.banOpts = b, set
	return nil
}

// lapiVersion is v as a User-Agent's version can carry it (no space,
// slash or control character); "unknown" when there is none.
func lapiVersion(v string) string {
	if v == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7f || r == '/' {
			return '-'
		}
		return r
	}, v)
}

// userAgent is what the plugin tells the LAPI it is: name/version.
func (s *bansSettings) userAgent() string { return "xdp-drop/" + s.version }

// bansSettings are the bans options parsed, for the bans owner.
type bansSettings struct {
	allow  allowList
	max    int
	dryRun bool // bans.dry_run, or the plugin's dry_run
	// pluginDryRun and bansDryRun are the plugin's dry_run and
	// bans.dry_run, each of which makes the detection a dry run.
	pluginDryRun, bansDryRun bool
	resolvConf               string // RunOptions.ResolvConf
	url                      string
	apiKey                   string // never logged nor echoed
	interval, resync         time.Duration
	types                    []string
	tls                      *gotls.Config
	version                  string          // the binary's, as the LAPI is told it
	detect                   *detectSettings // nil without [bans.detect]
	// view: a console view, which reads the bans in force from the
	// kernel, of the origins viewed (the config's), and pulls nothing.
	view   bool
	viewed []viewedOrigin
	ns     string // the namespace option: where the detection's guards are read
	// allowReported is the allow_prefix_file error last reported.
	allowReported string
}

// parseBans checks [inputs.xdp_drop.bans] and reads its files (allow
// prefix files and api_key_file) under the trust check for uid (unless
// trust.NoCheck). Every refusal is an *OptionError naming its option. A
// view reads no key: it pulls nothing.
func parseBans(c *BansConfig, dryRun bool, uid int, view, flowSpec bool) (*bansSettings, error) {
	s := &bansSettings{max: DefaultBansMax, dryRun: dryRun || c.DryRun, pluginDryRun: dryRun, bansDryRun: c.DryRun, view: view}
	var errs []error
	fail := func(key string, err error) {
		if err != nil {
			errs = append(errs, optionError(key, err))
		}
	}
	s.allow.reader = prefixLists{trustCheck: uid != trust.NoCheck, trustUID: uid}
	s.allow.load(c, fail)
	switch {
	case c.Max == 0:
	case c.Max < 0 || c.Max > MaxBansMax:
		fail(keyBansMax, fmt.Errorf("bans.max = %d is out of range; bans in force at once, per family, are 1-%d (default %d)", c.Max, MaxBansMax, DefaultBansMax))
	default:
		s.max = int(c.Max)
	}
	if c.CrowdSec == nil {
		// With [flowspec] a table without a feed is the allow-list that
		// FlowSpec's rules never drop.
		if c.Detect == nil && !flowSpec {
			fail(keyBans, errors.New("[inputs.xdp_drop.bans] has no feed; add [inputs.xdp_drop.bans.crowdsec] with the url and api_key_file of a CrowdSec LAPI, or [inputs.xdp_drop.bans.detect], or [inputs.xdp_drop.flowspec] (then allow_prefix is the sources FlowSpec never drops), or remove the bans table"))
		}
		if c.Detect == nil && c.Max == 0 {
			// Nothing bans: the maps hold the allow-list, not 100,000 bans.
			s.max = allowOnlyBansMax
		}
		return s, errors.Join(errs...)
	}
	errs = append(errs, s.parseCrowdSec(c.CrowdSec, uid)...)
	return s, errors.Join(errs...)
}

// prefixedError makes a refusal of a prefix list name its option.
func prefixedError(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", key, err)
}

// parseCrowdSec checks [inputs.xdp_drop.bans.crowdsec] into s.
func (s *bansSettings) parseCrowdSec(c *CrowdSecConfig, uid int) []error {
	var errs []error
	fail := func(key string, err error) {
		if err != nil {
			errs = append(errs, optionError(key, err))
		}
	}
	u, err := checkLAPIURL(c.URL)
	fail(keyCrowdSecURL, err)
	if !s.view {
		// A view pulls nothing: it has no client, and needs no key.
		s.url = c.URL
		s.apiKey, err = readAPIKey(c, uid)
		fail(keyAPIKey, err)
	}
	switch d := time.Duration(c.Interval); {
	case d == 0:
		s.interval = DefaultCrowdSecInterval
	case d < MinCrowdSecInterval || d > MaxCrowdSecInterval:
		fail(keyInterval, fmt.Errorf(`bans.crowdsec.interval = "%s" is out of range; poll the LAPI every %s to %s (default "%s"): one request per host per interval`, d, MinCrowdSecInterval, MaxCrowdSecInterval, DefaultCrowdSecInterval))
	default:
		s.interval = d
	}
	switch d := time.Duration(c.Resync); {
	case d == 0:
		s.resync = max(DefaultCrowdSecResync, s.interval)
	case d < s.interval || d > MaxCrowdSecResync:
		fail(keyResync, fmt.Errorf(`bans.crowdsec.resync = "%s" is out of range; pull the full list every interval (%s) to %s (default "%s"): a decision the LAPI's deltas missed is banned within resync, at the cost of one full list per host per resync`, d, s.interval, MaxCrowdSecResync, DefaultCrowdSecResync))
	default:
		s.resync = d
	}
	s.types, err = checkDecisionTypes(c.Types)
	fail(keyTypes, err)
	s.tls, err = c.TLSConfig()
	if err != nil {
		fail(keyTLS, fmt.Errorf("bans.crowdsec: tls_ca, tls_cert, tls_key: %w", err))
	} else if s.tls != nil && u != nil && u.Scheme == "http" && c.Enable == nil {
		fail(keyTLS, fmt.Errorf("bans.crowdsec: TLS options are set but url = %s is http; use an https:// url, or remove the tls_ options", quote.Value(c.URL)))
	}
	return errs
}

// checkLAPIURL checks the LAPI's url: http or https, with a host.
func checkLAPIURL(raw string) (*url.URL, error) {
	const want = `; write the LAPI's address, such as "http://127.0.0.1:8080/"`
	if raw == "" {
		return nil, errors.New("bans.crowdsec.url is missing" + want)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || hasControl(raw):
		return nil, fmt.Errorf("bans.crowdsec.url = %s is not a URL%s", quote.Value(raw), want)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("bans.crowdsec.url = %s: the scheme must be http or https%s", quote.Value(raw), want)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("bans.crowdsec.url = %s has no host%s", quote.Value(raw), want)
	case u.User != nil:
		return nil, fmt.Errorf("bans.crowdsec.url = %s holds credentials; the LAPI takes the bouncer's key: set api_key_file", quote.Value(u.Redacted()))
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("bans.crowdsec.url = %s has a query or fragment; give the LAPI's base address%s", quote.Value(raw), want)
	}
	return u, nil
}

// readAPIKey is the bouncer's key: api_key, or the first line of
// api_key_file read under the trust check. Errors never echo the key.
func readAPIKey(c *CrowdSecConfig, uid int) (string, error) {
	switch {
	case c.APIKey != "" && c.APIKeyFile != "":
		return "", errors.New("bans.crowdsec: api_key and api_key_file are both set; set one")
	case c.APIKey == "" && c.APIKeyFile == "" && len(c.APIKeyVars) > 0:
		return "", emptyVarsError(c.APIKeyVars)
	case c.APIKey == "" && c.APIKeyFile == "":
		return "", errors.New(`bans.crowdsec: api_key_file (or api_key) is missing; create a key with "cscli bouncers add xdp-drop-<host>" on the LAPI's host and set api_key_file = "/etc/telegraf-xdp-drop/crowdsec.key"`)
	case c.APIKey != "":
		return c.APIKey, checkAPIKey("bans.crowdsec.api_key", c.APIKey)
	}
	if !strings.HasPrefix(c.APIKeyFile, "/") || hasControl(c.APIKeyFile) || len(c.APIKeyFile) > maxPath {
		return "", fmt.Errorf("bans.crowdsec.api_key_file = %s is not an absolute path; write it from /, such as \"/etc/telegraf-xdp-drop/crowdsec.key\"", quote.Value(c.APIKeyFile))
	}
	f, _, err := trust.OpenRegular(c.APIKeyFile, uid, "api_key_file")
	if err != nil {
		return "", fmt.Errorf("bans.crowdsec.api_key_file: %w; write the key \"cscli bouncers add\" printed into it, readable by the service user alone", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxAPIKeyFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("bans.crowdsec.api_key_file: read %s: %w", c.APIKeyFile, err)
	case len(raw) > maxAPIKeyFile:
		return "", fmt.Errorf("bans.crowdsec.api_key_file: %s is larger than %d bytes; it holds the bouncer's key alone", c.APIKeyFile, maxAPIKeyFile)
	}
	key, _, _ := strings.Cut(string(raw), "\n")
	key = strings.TrimSpace(key)
	return key, checkAPIKey("bans.crowdsec.api_key_file: "+c.APIKeyFile, key)
}

// checkAPIKey refuses a key a header cannot carry; what holds it names it.
func checkAPIKey(what, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%s: the key is empty; write the key \"cscli bouncers add\" printed", what)
	case strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
		return fmt.Errorf("%s: the key holds a space, control or non-ASCII character, which no CrowdSec key does; write the key \"cscli bouncers add\" printed", what)
	}
	return nil
}

// checkDecisionTypes checks types: the decision types enforced (default ban).
func checkDecisionTypes(types []string) ([]string, error) {
	if types == nil {
		return []string{"ban"}, nil
	}
	if len(types) == 0 {
		return nil, errors.New(`bans.crowdsec.types is empty; list the decision types to drop, such as ["ban"]`)
	}
	seen := map[string]bool{}
	for _, t := range types {
		switch {
		case t == "" || len(t) > 64 || strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
			return nil, fmt.Errorf(`bans.crowdsec.types: %s is not a decision type; list types such as "ban"`, quote.Value(t))
		case seen[t]:
			return nil, fmt.Errorf("bans.crowdsec.types: %s is listed twice; list each type once", quote.Value(t))
		}
		seen[t] = true
	}
	return types, nil
}
