package xdp_drop

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/influxdata/telegraf/config"

	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// DetectConfig is [inputs.xdp_drop.bans.detect]: sources whose passed
// frames exceed a rate for a while are banned by the plugin itself.
type DetectConfig struct {
	PPS                  int64           `toml:"pps"`
	BytesPerSecond       int64           `toml:"bytes_per_second"`
	For                  config.Duration `toml:"for"`
	Protocols            []any           `toml:"protocols"`
	Duration             config.Duration `toml:"duration"`
	MaxDuration          config.Duration `toml:"max_duration"`
	DryRun               *bool           `toml:"dry_run"`
	CrowdSecPush         bool            `toml:"crowdsec_push"`
	CrowdSecLogin        string          `toml:"crowdsec_login"`
	CrowdSecPasswordFile string          `toml:"crowdsec_password_file"`
	UnverifiedAction     string          `toml:"unverified_action"`
	PushUnverified       bool            `toml:"push_unverified"`
	MaxBansPerMinute     *int64          `toml:"max_bans_per_minute"`
	MaxPushesPerMinute   *int64          `toml:"max_pushes_per_minute"`
}

// Defaults and bounds of the detect options.
const (
	DefaultDetectFor         = 2 * time.Second
	DefaultDetectDuration    = 10 * time.Minute
	DefaultDetectMaxDuration = 24 * time.Hour
	MaxDetectFor             = time.Hour
	MaxDetectDuration        = 365 * 24 * time.Hour
	MaxDetectPPS             = 1_000_000_000
	MaxDetectBytesPerSecond  = 1 << 40
	DefaultMaxBansPerMinute  = bans.DefaultBudget
	DefaultMaxPushesPerMin   = bans.DefaultBudget
	MaxBudgetPerMinute       = 10_000
	maxPasswordFile          = 4096
)

// Keys of the detect options, as errors name them.
const (
	keyDetect             = "bans.detect"
	keyDetectPPS          = "bans.detect.pps"
	keyDetectBPS          = "bans.detect.bytes_per_second"
	keyDetectFor          = "bans.detect.for"
	keyDetectProtocols    = "bans.detect.protocols"
	keyDetectDuration     = "bans.detect.duration"
	keyDetectMaxDuration  = "bans.detect.max_duration"
	keyDetectPush         = "bans.detect.crowdsec_push"
	keyDetectLogin        = "bans.detect.crowdsec_login"
	keyDetectPasswordFile = "bans.detect.crowdsec_password_file"
	keyDetectUnverified   = "bans.detect.unverified_action"
	keyDetectPushUnverif  = "bans.detect.push_unverified"
	keyDetectMaxBans      = "bans.detect.max_bans_per_minute"
	keyDetectMaxPushes    = "bans.detect.max_pushes_per_minute"
)

// detectSettings are the detect options parsed.
type detectSettings struct {
	pps, bps              float64 // 0: no limit
	forDur                time.Duration
	protocols             []uint8
	duration, maxDuration time.Duration
	dryRun                bool // bans.detect.dry_run alone (detectDryRun adds what implies it)
	push                  bool
	login                 string
	password              string // never logged nor echoed
	bits4, bits6          int    // top_source_prefix_ipv4, _ipv6: what a source is
	unverified            detect.Action
	pushUnverified        bool
	maxBans, maxPushes    int // a minute
}

// parseDetect checks [bans.detect]; the plugin's sampling must send the
// passed frames up. crowdsec says whether [bans.crowdsec] is set (the
// LAPI a push goes to).
func (x *XDPDrop) parseDetect(c *DetectConfig, crowdsec bool, uid int) (*detectSettings, error) {
	s := &detectSettings{
		pps: float64(c.PPS), bps: float64(c.BytesPerSecond), dryRun: true,
		forDur: DefaultDetectFor, duration: DefaultDetectDuration, maxDuration: DefaultDetectMaxDuration,
		bits4: int(x.TopSourcePrefixV4), bits6: int(x.TopSourcePrefixV6),
	}
	var errs []error
	fail := func(key string, err error) {
		if err != nil {
			errs = append(errs, optionError(key, err))
		}
	}
	switch {
	case x.SampleRate <= 0:
		fail(keyDetect, errors.New("[inputs.xdp_drop.bans.detect] rates sources from the sampled frames that pass: set sample_rate (e.g. sample_rate = 100) and sample_actions = [\"drop\", \"pass\"]"))
	case !slices.Contains(x.SampleActions, ActionPass):
		fail(keyDetect, fmt.Errorf("[inputs.xdp_drop.bans.detect] rates sources from the sampled frames that pass, but sample_actions = %s leaves them out: add \"pass\", e.g. sample_actions = [\"drop\", \"pass\"]", quote.List(x.SampleActions)))
	case x.CaptureSnaplen < MinTopSnaplen:
		fail(keyDetect, fmt.Errorf("[inputs.xdp_drop.bans.detect] reads source addresses up to byte %d of the sampled frames, but capture_snaplen = %d; use at least %d", MinTopSnaplen, x.CaptureSnaplen, MinTopSnaplen))
	}
	switch {
	case c.PPS < 0 || c.PPS > MaxDetectPPS:
		fail(keyDetectPPS, fmt.Errorf("bans.detect.pps = %d is out of range; use 1 to %d frames a second, or 0 for no packet rate", c.PPS, MaxDetectPPS))
	case c.BytesPerSecond < 0 || c.BytesPerSecond > MaxDetectBytesPerSecond:
		fail(keyDetectBPS, fmt.Errorf("bans.detect.bytes_per_second = %d is out of range; use 1 to %d, or 0 for no byte rate", c.BytesPerSecond, int64(MaxDetectBytesPerSecond)))
	case c.PPS == 0 && c.BytesPerSecond == 0:
		fail(keyDetectPPS, errors.New("bans.detect: neither pps nor bytes_per_second is set; set the rate over which a source is banned, e.g. pps = 50000"))
	}
	if d := time.Duration(c.For); d != 0 {
		if d < time.Second || d > MaxDetectFor || d%time.Second != 0 {
			fail(keyDetectFor, fmt.Errorf(`bans.detect.for = "%s" is out of range; use whole seconds from 1s to %s (default "%s"): the detector rates sources every second`, d, MaxDetectFor, DefaultDetectFor))
		}
		s.forDur = d
	}
	protos, err := parseRuleProtocols(c.Protocols)
	fail(keyDetectProtocols, prefixedError(keyDetectProtocols, err))
	s.protocols = protos
	if d := time.Duration(c.Duration); d != 0 {
		if d < time.Second || d > MaxDetectDuration {
			fail(keyDetectDuration, fmt.Errorf(`bans.detect.duration = "%s" is out of range; use 1s to %s (default "%s")`, d, MaxDetectDuration, DefaultDetectDuration))
		}
		s.duration = d
	}
	if d := time.Duration(c.MaxDuration); d != 0 {
		if d > MaxDetectDuration {
			fail(keyDetectMaxDuration, fmt.Errorf(`bans.detect.max_duration = "%s" is out of range; use up to %s (default "%s")`, d, MaxDetectDuration, DefaultDetectMaxDuration))
		}
		s.maxDuration = d
	} else if s.duration > s.maxDuration {
		s.maxDuration = s.duration
	}
	if s.maxDuration < s.duration {
		fail(keyDetectMaxDuration, fmt.Errorf(`bans.detect.max_duration = "%s" is shorter than duration = "%s"; a ban again doubles up to max_duration: set it at least to duration`, s.maxDuration, s.duration))
	}
	if c.DryRun != nil {
		s.dryRun = *c.DryRun
	}
	switch a, ok := detect.ParseAction(c.UnverifiedAction); {
	case c.UnverifiedAction == "":
		s.unverified = detect.Limit
	case !ok:
		fail(keyDetectUnverified, fmt.Errorf(`bans.detect.unverified_action = %s is not an action; use "limit" (the default: cap the source at the rate), "drop" (drop all of it) or "none" (no ban)`, quote.Value(c.UnverifiedAction)))
	default:
		s.unverified = a
	}
	s.maxBans = budget(c.MaxBansPerMinute, DefaultMaxBansPerMinute, keyDetectMaxBans, fail)
	s.maxPushes = budget(c.MaxPushesPerMinute, DefaultMaxPushesPerMin, keyDetectMaxPushes, fail)
	if c.PushUnverified && !c.CrowdSecPush {
		fail(keyDetectPushUnverif, errors.New("bans.detect.push_unverified = true but crowdsec_push = false: nothing is pushed; set crowdsec_push = true, or remove push_unverified"))
	}
	s.pushUnverified = c.PushUnverified
	errs = append(errs, s.parsePush(c, crowdsec, uid)...)
	return s, errors.Join(errs...)
}

// budget is a per-minute budget option: def when unset, 1 to
// MaxBudgetPerMinute.
func budget(v *int64, def int, key string, fail func(string, error)) int {
	if v == nil {
		return def
	}
	if *v < 1 || *v > MaxBudgetPerMinute {
		fail(key, fmt.Errorf("%s = %d is out of range; use 1 to %d (default %d): a flood from more sources than that is for a limit rule ([[inputs.xdp_drop.rule]] action = \"limit\")", key, *v, MaxBudgetPerMinute, def))
		return def
	}
	return int(*v)
}

// parsePush checks the options of crowdsec_push.
func (s *detectSettings) parsePush(c *DetectConfig, crowdsec bool, uid int) []error {
	if !c.CrowdSecPush {
		if c.CrowdSecLogin != "" || c.CrowdSecPasswordFile != "" {
			return []error{optionError(keyDetectPush, errors.New("bans.detect: crowdsec_login or crowdsec_password_file is set but crowdsec_push = false; set crowdsec_push = true to share the bans, or remove them"))}
		}
		return nil
	}
	s.push = true
	var errs []error
	if !crowdsec {
		errs = append(errs, optionError(keyDetectPush, errors.New("bans.detect.crowdsec_push = true needs [inputs.xdp_drop.bans.crowdsec]: its url is the LAPI the bans go to")))
	}
	s.login = c.CrowdSecLogin
	if s.login == "" {
		host, _ := os.Hostname()
		s.login = "xdp-drop-" + host
	}
	if len(s.login) > 255 || strings.IndexFunc(s.login, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		errs = append(errs, optionError(keyDetectLogin, fmt.Errorf("bans.detect.crowdsec_login = %s holds a space, control or non-ASCII character, or is too long; use the name given to 'cscli machines add'", quote.Value(s.login))))
	}
	pw, err := readPasswordFile(c.CrowdSecPasswordFile, uid)
	if err != nil {
		errs = append(errs, optionError(keyDetectPasswordFile, err))
	}
	s.password = pw
	return errs
}

// readPasswordFile is the machine's password: the first line of path,
// read under the trust check for uid. Errors never echo it.
func readPasswordFile(path string, uid int) (string, error) {
	const hint = `; write the password given to "cscli machines add <login> --password ..." into it, readable by the service user alone`
	switch {
	case path == "":
		return "", errors.New(`bans.detect.crowdsec_password_file is missing: crowdsec_push logs in as a CrowdSec machine; set crowdsec_password_file = "/etc/telegraf-xdp-drop/crowdsec-machine.pw"` + hint)
	case !strings.HasPrefix(path, "/") || hasControl(path) || len(path) > maxPath:
		return "", fmt.Errorf("bans.detect.crowdsec_password_file = %s is not an absolute path; write it from /, such as \"/etc/telegraf-xdp-drop/crowdsec-machine.pw\"", quote.Value(path))
	}
	f, _, err := trust.OpenRegular(path, uid, "crowdsec_password_file")
	if err != nil {
		return "", fmt.Errorf("bans.detect.crowdsec_password_file: %w%s", err, hint)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxPasswordFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("bans.detect.crowdsec_password_file: read %s: %w", path, err)
	case len(raw) > maxPasswordFile:
		return "", fmt.Errorf("bans.detect.crowdsec_password_file: %s is larger than %d bytes; it holds the password alone", path, maxPasswordFile)
	}
	pw, _, _ := strings.Cut(string(raw), "\n")
	pw = strings.TrimRight(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("bans.detect.crowdsec_password_file: %s: the first line is empty%s", path, hint)
	}
	return pw, nil
}
