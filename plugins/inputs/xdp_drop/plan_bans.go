package xdp_drop

import (
	gotls "crypto/tls"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// PlannedBans is [bans] as -check shows it: the feed, the allow list and
// detection as Init read them, and the ban maps' memory.
type PlannedBans struct {
	Max    int
	DryRun bool
	// URL and KeyFrom (api_key_file's path, or "api_key") are the feed's;
	// "" without [bans.crowdsec].
	URL, KeyFrom      string
	AllowV4, AllowV6  int // the allowed prefixes, options and files merged
	AllowFiles        int
	Detect            *DetectConfig // as configured; nil without [bans.detect]
	DetectDryRun      bool
	DetectDryRunWhy   string // the option that makes it one
	DetectFor         time.Duration
	DetectDuration    time.Duration
	DetectMaxDuration time.Duration
	// DetectUnverified is unverified_action's value; DetectPushUnverified
	// push_unverified's; DetectMaxBans and DetectMaxPushes the budgets.
	DetectUnverified               string
	DetectPushUnverified           bool
	DetectMaxBans, DetectMaxPushes int
	MapMemory                      uint64 // the ban maps at their most (bpf.BanMapMemory)
}

// planBans is the bans' part of the plan; nil without [bans].
func (x *XDPDrop) planBans() *PlannedBans {
	if x.bans == nil || x.Bans == nil {
		return nil
	}
	s := x.banOpts
	p := &PlannedBans{Max: s.max, DryRun: s.dryRun, URL: s.url, AllowFiles: len(s.allow.files),
		MapMemory: bpf.BanMapMemory(s.max)}
	if allow, err := s.allow.union(); err == nil {
		p.AllowV4, p.AllowV6 = familyCounts(allow)
	}
	if c := x.Bans.CrowdSec; c != nil {
		p.KeyFrom = "api_key"
		if c.APIKeyFile != "" {
			p.KeyFrom = c.APIKeyFile
		}
	}
	if d := x.Bans.Detect; d != nil {
		p.Detect = d
		p.DetectDryRun, p.DetectDryRunWhy = detectDryRun(x.DryRun, x.Bans.DryRun, d.DryRun)
		p.DetectFor, p.DetectDuration, p.DetectMaxDuration = orDefault(time.Duration(d.For), DefaultDetectFor),
			orDefault(time.Duration(d.Duration), DefaultDetectDuration), orDefault(time.Duration(d.MaxDuration), DefaultDetectMaxDuration)
		if ds := s.detect; ds != nil {
			p.DetectUnverified, p.DetectPushUnverified = ds.unverified.String(), ds.pushUnverified
			p.DetectMaxBans, p.DetectMaxPushes = ds.maxBans, ds.maxPushes
		}
	}
	return p
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// LAPIAccess is what -check -check-lapi needs to ask the LAPI once with
// the bouncer's key; ok is false without [bans.crowdsec]. The key is for
// the X-Api-Key header only: never print it.
func (x *XDPDrop) LAPIAccess() (url, key string, tls *gotls.Config, ok bool) {
	if x.bans == nil || x.banOpts.url == "" {
		return "", "", nil, false
	}
	s := x.banOpts
	return s.url, s.apiKey, s.tls, true
}
