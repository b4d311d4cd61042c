package xdp_drop

import (
	"errors"
	"fmt"

	"github.com/xdp-drop/xdp_drop/internal/bans"
)

// settings are the options parsed as the bans take them: checked values,
// no option names. A view pulls no feed and detects nothing.
func (s *bansSettings) settings() (bans.Settings, error) {
	allow, err := s.allow.union()
	if err != nil {
		return bans.Settings{}, optionError(keyAllowPrefix, err)
	}
	out := bans.Settings{
		Max: s.max, DryRun: s.dryRun, Allow: allow, LAPI: s.url, TLS: s.tls,
		UserAgent: s.userAgent(), Namespace: s.ns, ResolvConf: s.resolvConf,
	}
	if s.url != "" && !s.view {
		out.Feed = &bans.FeedSettings{APIKey: s.apiKey, Interval: s.interval, Resync: s.resync, Types: s.types}
	}
	if d := s.detect; d != nil && !s.view {
		dry, _ := detectDryRun(s.pluginDryRun, s.bansDryRun, &d.dryRun)
		out.Detect = &bans.DetectSettings{
			PPS: d.pps, BPS: d.bps, For: d.forDur, Protocols: d.protocols,
			Duration: d.duration, MaxDuration: d.maxDuration, DryRun: dry,
			Push: d.push, Login: d.login, Password: d.password, ProtocolNames: &protocolTags,
			Bits4: d.bits4, Bits6: d.bits6, Unverified: d.unverified, PushUnverified: d.pushUnverified,
			MaxBansPerMinute: d.maxBans, MaxPushesPerMinute: d.maxPushes,
		}
	}
	return out, nil
}

// detectDryRun says whether the detection is a dry run, and which option
// makes it one: the plugin's dry_run and the bans' imply it (a dry run
// drops nothing, so it bans and pushes nothing either); detect is
// bans.detect.dry_run as configured (nil: unset, true by default).
func detectDryRun(plugin, bans bool, detect *bool) (bool, string) {
	switch {
	case plugin:
		return true, "the plugin's dry_run = true"
	case bans:
		return true, "bans.dry_run = true"
	case detect == nil:
		return true, "bans.detect.dry_run, true by default"
	case *detect:
		return true, "bans.detect.dry_run = true"
	}
	return false, ""
}

// settingError names the option of a setting bans.New refused.
func settingError(err error) error {
	var se *bans.SettingError
	if !errors.As(err, &se) {
		return err
	}
	switch se.Setting {
	case bans.SettingFeed:
		return optionError(keyCrowdSecURL, fmt.Errorf("bans.crowdsec: %w", se.Err))
	case bans.SettingPush:
		return optionError(keyDetectPush, fmt.Errorf("bans.detect.crowdsec_push: %w", se.Err))
	}
	return optionError(keyDetect, fmt.Errorf("bans.detect: %w", se.Err))
}
