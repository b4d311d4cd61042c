package xdp_drop

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// detectConfigPlugin is a plugin with sampling of the passed frames and
// the detection d, parsed only.
func detectConfigPlugin(d *DetectConfig, b *BansConfig) *XDPDrop {
	if b == nil {
		b = &BansConfig{}
	}
	b.Detect = d
	return withDefaults(&XDPDrop{
		Interfaces: []string{"eth1"}, Drop: []any{"gre"},
		SampleRate: 100, SampleActions: []string{ActionDrop, ActionPass},
		Bans: b, Log: testutil.Logger{},
	})
}

// TestDetectConfig: a good [bans.detect] alone makes a bans table with a
// detection, with its defaults where unset: dry run, for 2s, 10m, 24h.
func TestDetectConfig(t *testing.T) {
	p := detectConfigPlugin(&DetectConfig{PPS: 50000}, nil)
	require.NoError(t, p.Init())
	require.True(t, p.links.policy.Bans.On)
	set := p.Bans.Detect
	require.NotNil(t, set)
	s, err := p.parseDetect(set, false, -1)
	require.NoError(t, err)
	require.Equal(t, &detectSettings{
		pps: 50000, forDur: 2 * time.Second, duration: 10 * time.Minute, maxDuration: 24 * time.Hour,
		dryRun: true, bits4: DefaultTopPrefixV4, bits6: DefaultTopPrefixV6,
		unverified: detect.Limit, maxBans: DefaultMaxBansPerMinute, maxPushes: DefaultMaxPushesPerMin,
	}, s)

	dir := t.TempDir()
	pw := filepath.Join(dir, "machine.pw")
	require.NoError(t, os.WriteFile(pw, []byte("pass word\n"), 0o600))
	p = detectConfigPlugin(&DetectConfig{
		BytesPerSecond: 1e9, For: config.Duration(5 * time.Second), Protocols: []any{"udp", int64(47)},
		Duration: config.Duration(time.Hour), DryRun: enforce(),
		CrowdSecPush: true, CrowdSecLogin: "edge-1", CrowdSecPasswordFile: pw,
		UnverifiedAction: "none", PushUnverified: true, MaxBansPerMinute: ptr(int64(3)), MaxPushesPerMinute: ptr(int64(2)),
	}, &BansConfig{CrowdSec: goodCrowdSec()})
	require.NoError(t, p.Init())
	s, err = p.parseDetect(p.Bans.Detect, true, -1)
	require.NoError(t, err)
	require.Equal(t, &detectSettings{
		bps: 1e9, forDur: 5 * time.Second, protocols: []uint8{17, 47}, duration: time.Hour, maxDuration: 24 * time.Hour,
		push: true, login: "edge-1", password: "pass word", bits4: DefaultTopPrefixV4, bits6: DefaultTopPrefixV6,
		unverified: detect.None, pushUnverified: true, maxBans: 3, maxPushes: 2,
	}, s)
}

// enforce is dry_run = false.
func enforce() *bool { f := false; return &f }

func ptr[T any](v T) *T { return &v }

// TestDetectConfigRefused: each bad value is refused by Init with an
// OptionError naming its option, saying what to do.
func TestDetectConfigRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pw")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	cases := []struct {
		name   string
		setup  func(p *XDPDrop)
		key    string
		saying string
	}{
		{"no sampling", func(p *XDPDrop) { p.SampleRate, p.SampleActions = 0, nil }, keyDetect, "set sample_rate"},
		{"pass not sampled", func(p *XDPDrop) { p.SampleActions = []string{ActionDrop} }, keyDetect, `add "pass"`},
		{"no rate", func(p *XDPDrop) { p.Bans.Detect.PPS = 0 }, keyDetectPPS, "neither pps nor bytes_per_second"},
		{"negative pps", func(p *XDPDrop) { p.Bans.Detect.PPS = -1 }, keyDetectPPS, "out of range"},
		{"huge bytes", func(p *XDPDrop) { p.Bans.Detect.BytesPerSecond = 1 << 50 }, keyDetectBPS, "out of range"},
		{"for under a second", func(p *XDPDrop) { p.Bans.Detect.For = config.Duration(500 * time.Millisecond) }, keyDetectFor, "whole seconds"},
		{"for not whole", func(p *XDPDrop) { p.Bans.Detect.For = config.Duration(1500 * time.Millisecond) }, keyDetectFor, "whole seconds"},
		{"bad protocol", func(p *XDPDrop) { p.Bans.Detect.Protocols = []any{"udpp"} }, keyDetectProtocols, "not an IP protocol name"},
		{"duration too long", func(p *XDPDrop) { p.Bans.Detect.Duration = config.Duration(400 * 24 * time.Hour) }, keyDetectDuration, "out of range"},
		{"max under duration", func(p *XDPDrop) {
			p.Bans.Detect.Duration, p.Bans.Detect.MaxDuration = config.Duration(time.Hour), config.Duration(time.Minute)
		}, keyDetectMaxDuration, "shorter than duration"},
		{"push without crowdsec", func(p *XDPDrop) {
			p.Bans.Detect.CrowdSecPush, p.Bans.Detect.CrowdSecPasswordFile = true, empty
		}, keyDetectPush, "needs [inputs.xdp_drop.bans.crowdsec]"},
		{"login without push", func(p *XDPDrop) { p.Bans.Detect.CrowdSecLogin = "x" }, keyDetectPush, "crowdsec_push = false"},
		{"no password file", func(p *XDPDrop) {
			p.Bans.CrowdSec, p.Bans.Detect.CrowdSecPush = goodCrowdSec(), true
		}, keyDetectPasswordFile, "crowdsec_password_file is missing"},
		{"empty password", func(p *XDPDrop) {
			p.Bans.CrowdSec, p.Bans.Detect.CrowdSecPush, p.Bans.Detect.CrowdSecPasswordFile = goodCrowdSec(), true, empty
		}, keyDetectPasswordFile, "the first line is empty"},
		{"relative password file", func(p *XDPDrop) {
			p.Bans.CrowdSec, p.Bans.Detect.CrowdSecPush, p.Bans.Detect.CrowdSecPasswordFile = goodCrowdSec(), true, "machine.pw"
		}, keyDetectPasswordFile, "not an absolute path"},
		{"bad login", func(p *XDPDrop) {
			p.Bans.CrowdSec, p.Bans.Detect.CrowdSecPush, p.Bans.Detect.CrowdSecPasswordFile = goodCrowdSec(), true, empty
			p.Bans.Detect.CrowdSecLogin = "a b"
		}, keyDetectLogin, "holds a space"},
		{"unknown unverified action", func(p *XDPDrop) { p.Bans.Detect.UnverifiedAction = "ban" }, keyDetectUnverified, `use "limit"`},
		{"push_unverified without push", func(p *XDPDrop) { p.Bans.Detect.PushUnverified = true }, keyDetectPushUnverif, "crowdsec_push = false"},
		{"no ban budget", func(p *XDPDrop) { p.Bans.Detect.MaxBansPerMinute = ptr(int64(0)) }, keyDetectMaxBans, "use 1 to 10000"},
		{"huge push budget", func(p *XDPDrop) { p.Bans.Detect.MaxPushesPerMinute = ptr(int64(1e6)) }, keyDetectMaxPushes, "limit rule"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := detectConfigPlugin(&DetectConfig{PPS: 50000}, nil)
			c.setup(p)
			err := p.Init()
			require.Error(t, err)
			var found bool
			for _, e := range Errors(err) {
				var oe *OptionError
				if errors.As(e, &oe) && oe.Key == c.key {
					require.Contains(t, e.Error(), c.saying)
					found = true
				}
			}
			require.True(t, found, "no error names %s: %v", c.key, err)
		})
	}
}
