package bans

import (
	gotls "crypto/tls"
	"errors"
	"net/netip"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// Settings are the bans' checked values: no option names, no TOML; the
// plugin turns its options into them and names the option of an error.
type Settings struct {
	Max int // bans in force at once, per family
	// DryRun: the bans count what they would drop; the detection is then
	// a dry run too, whatever Detect.DryRun says.
	DryRun bool
	// Allow are the allowed prefixes in force from the start (Allow
	// changes them).
	Allow []netip.Prefix
	// LAPI is the CrowdSec LAPI's URL (the detection's guards keep it
	// unbanned, and pushes go to it); "" without one.
	LAPI      string
	TLS       *gotls.Config
	UserAgent string          // what the LAPI is told the bouncer is
	Feed      *FeedSettings   // nil: no feed pulled
	Detect    *DetectSettings // nil without a detection
	Namespace string          // the network namespace the guards are read in; "" for the process's
	// ResolvConf is the resolver file whose nameservers the detection
	// never bans; "" for the namespace's: /etc/netns/<name>/resolv.conf
	// when it exists, else /etc/resolv.conf.
	ResolvConf string
}

// FeedSettings are the CrowdSec stream's: the bouncer's key, how often it
// is pulled and fully pulled again, the decision types enforced.
type FeedSettings struct {
	APIKey   string // never logged nor echoed
	Interval time.Duration
	// Resync is how often the full list is pulled although every delta
	// succeeded: the LAPI's delta stream can miss a decision made while it
	// answers a pull, which only a full list then brings. 0: never.
	Resync time.Duration
	Types  []string
}

// DetectSettings are the detection's: the rates a source is held
// against, for how long, the bans' durations, and the push to the LAPI.
type DetectSettings struct {
	PPS, BPS              float64 // 0: no limit
	For                   time.Duration
	Protocols             []uint8
	Duration, MaxDuration time.Duration
	DryRun                bool // log and count, ban nothing, push nothing
	Push                  bool
	Login                 string
	Password              string // never logged nor echoed
	// ProtocolNames names each IP protocol number in logs and evidence.
	ProtocolNames *[256]string
	// Bits4 and Bits6 are the aggregation of sources into prefixes.
	Bits4, Bits6 int
	// Unverified is what a ban on unverified evidence does; PushUnverified
	// pushes those bans too (verified ones are pushed with Push).
	Unverified     detect.Action
	PushUnverified bool
	// MaxBansPerMinute and MaxPushesPerMinute bound the new bans and the
	// pushes of any minute, across reloads; 0 is DefaultBudget.
	MaxBansPerMinute, MaxPushesPerMinute int
}

// DefaultBudget is the bans and the pushes of a minute when the settings
// give none.
const DefaultBudget = 10

// budgetOr is n, or DefaultBudget for 0.
func budgetOr(n int) int {
	if n == 0 {
		return DefaultBudget
	}
	return n
}

// Setting names which of the settings an error of New is about.
type Setting int

const (
	SettingFeed   Setting = iota // the CrowdSec client
	SettingDetect                // the detector
	SettingPush                  // the detection's push to the LAPI
)

// SettingError is a setting New refused, and why.
type SettingError struct {
	Setting Setting
	Err     error
}

func (e *SettingError) Error() string { return e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Logger is where the bans log (telegraf.Logger is one).
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
}

// Errors is where the bans report a failure (telegraf.Accumulator is one).
type Errors interface {
	AddError(err error)
}

// firstLine is err's first line, for a point: a longer message says where
// the rest went.
func firstLine(err error) string {
	msg, rest, multi := strings.Cut(err.Error(), "\n")
	if !multi || rest == "" {
		return msg
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return msg + " (verifier log in Telegraf's log)"
	}
	return msg + " (the rest in Telegraf's log)"
}
