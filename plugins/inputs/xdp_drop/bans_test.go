package xdp_drop

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/common/tls"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

const testBouncerKey = "b0uncerK3yS3cret"

func bansPlugin(b *BansConfig) *XDPDrop {
	return withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"udp"}, Bans: b, Log: testutil.Logger{}})
}

func goodCrowdSec() *CrowdSecConfig {
	return &CrowdSecConfig{URL: "http://127.0.0.1:8080/", APIKey: testBouncerKey}
}

// TestBansConfig: a good [bans] turns the programs' ban code on with max,
// dry run and the allowed prefixes of the options and the files, and the
// key of api_key_file without its newline; defaults where unset.
func TestBansConfig(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "crowdsec.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(testBouncerKey+"\n"), 0o600))
	allowFile := filepath.Join(dir, "allow.txt")
	require.NoError(t, os.WriteFile(allowFile, []byte("# ours\n198.51.100.0/24\n2001:db8::1\n"), 0o600))

	p := bansPlugin(&BansConfig{
		AllowPrefix: []string{"192.0.2.0/24"}, AllowPrefixFile: []string{allowFile}, Max: 5000,
		CrowdSec: &CrowdSecConfig{URL: "https://lapi.example:8080/", APIKeyFile: keyFile, Interval: config.Duration(time.Second), Resync: config.Duration(time.Minute), Types: []string{"ban", "captcha"}},
	})
	p.DryRun = true
	require.NoError(t, p.Init())
	require.True(t, p.links.policy.Bans.On)
	require.True(t, p.links.policy.Bans.DryRun, "the plugin's dry_run holds for the bans too")
	require.Equal(t, 5000, p.links.policy.Bans.Max)
	set := p.banOpts
	require.Equal(t, testBouncerKey, set.apiKey)
	require.Equal(t, time.Second, set.interval)
	require.Equal(t, time.Minute, set.resync)
	require.Equal(t, []string{"ban", "captcha"}, set.types)
	require.Equal(t, "[192.0.2.0/24 198.51.100.0/24 2001:db8::1/128]", fmtPrefixes(mustUnion(t, &set.allow)))

	p = bansPlugin(&BansConfig{CrowdSec: goodCrowdSec()})
	require.NoError(t, p.Init())
	require.Equal(t, DefaultBansMax, p.links.policy.Bans.Max)
	require.False(t, p.links.policy.Bans.DryRun)
	require.Equal(t, DefaultCrowdSecInterval, p.banOpts.interval)
	require.Equal(t, DefaultCrowdSecResync, p.banOpts.resync)
	slow := goodCrowdSec()
	slow.Interval = config.Duration(time.Hour)
	p = bansPlugin(&BansConfig{CrowdSec: slow})
	require.NoError(t, p.Init())
	require.Equal(t, time.Hour, p.banOpts.resync, "resync's default is never shorter than interval")
	require.Equal(t, []string{"ban"}, p.banOpts.types)

	p = withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"udp"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	require.False(t, p.links.policy.Bans.On, "without [bans] the programs have no ban code")
	require.Nil(t, p.bans)
}

// TestBansWithoutDrop: with [bans], drop may be empty, as the and
// the docs' config has it: frames no ban decides pass. Without bans (or
// rules) an empty drop is still refused.
func TestBansWithoutDrop(t *testing.T) {
	p := withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{}, Bans: &BansConfig{CrowdSec: goodCrowdSec()}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	require.True(t, p.links.policy.Bans.On)
	require.False(t, p.links.policy.DropAll)
	require.Empty(t, p.links.policy.Protocols, "no protocol dropped")

	p = withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{}, Log: testutil.Logger{}})
	err := p.Init()
	require.ErrorContains(t, err, "drop is empty")
	require.ErrorContains(t, err, "or give rules or [inputs.xdp_drop.bans]")
}

func fmtPrefixes[T any](ps []T) string { return fmt.Sprint(ps) }

// TestBansConfigRefused: every bad bans option is refused by Init with an
// OptionError naming it, the bad value and what to write; the key is never
// echoed.
func TestBansConfigRefused(t *testing.T) {
	dir := t.TempDir()
	badAllow := filepath.Join(dir, "allow.txt")
	require.NoError(t, os.WriteFile(badAllow, []byte("192.0.2.0/24\nnot-a-prefix\n"), 0o600))
	manyAllowed := filepath.Join(dir, "many.txt")
	var lines []byte
	for i := 0; i <= bpf.MaxBanAllow; i++ {
		lines = fmt.Appendf(lines, "10.%d.%d.0/24\n", i>>8, i&0xff)
	}
	require.NoError(t, os.WriteFile(manyAllowed, lines, 0o600))
	wholeAllow := filepath.Join(dir, "whole.txt")
	require.NoError(t, os.WriteFile(wholeAllow, []byte("192.0.2.0/24\n# all of IPv6\n::/0 ; everything\n"), 0o600))
	emptyKey := filepath.Join(dir, "empty.key")
	require.NoError(t, os.WriteFile(emptyKey, []byte("\n"), 0o600))
	with := func(f func(b *BansConfig)) *BansConfig {
		b := &BansConfig{CrowdSec: goodCrowdSec()}
		f(b)
		return b
	}
	for _, tc := range []struct {
		name, key, msg string
		bans           *BansConfig
	}{
		{"no feed", "bans", "[inputs.xdp_drop.bans] has no feed; add [inputs.xdp_drop.bans.crowdsec]", &BansConfig{}},
		{"no url", "bans.crowdsec.url", `bans.crowdsec.url is missing; write the LAPI's address, such as "http://127.0.0.1:8080/"`, with(func(b *BansConfig) { b.CrowdSec.URL = "" })},
		{"ftp url", "bans.crowdsec.url", `bans.crowdsec.url = "ftp://lapi:21/": the scheme must be http or https`, with(func(b *BansConfig) { b.CrowdSec.URL = "ftp://lapi:21/" })},
		{"no host", "bans.crowdsec.url", `bans.crowdsec.url = "http:///v1" has no host`, with(func(b *BansConfig) { b.CrowdSec.URL = "http:///v1" })},
		{"not a url", "bans.crowdsec.url", `bans.crowdsec.url = "http://[::1" is not a URL`, with(func(b *BansConfig) { b.CrowdSec.URL = "http://[::1" })},
		{"credentials in url", "bans.crowdsec.url", `bans.crowdsec.url = "http://user:xxxxx@lapi:8080/" holds credentials`, with(func(b *BansConfig) { b.CrowdSec.URL = "http://user:" + testBouncerKey + "@lapi:8080/" })},
		{"no key", "bans.crowdsec.api_key", "bans.crowdsec: api_key_file (or api_key) is missing", with(func(b *BansConfig) { b.CrowdSec.APIKey = "" })},
		{"both keys", "bans.crowdsec.api_key", "bans.crowdsec: api_key and api_key_file are both set; set one", with(func(b *BansConfig) { b.CrowdSec.APIKeyFile = "/etc/k" })},
		{"key with space", "bans.crowdsec.api_key", "bans.crowdsec.api_key: the key holds a space, control or non-ASCII character", with(func(b *BansConfig) { b.CrowdSec.APIKey = testBouncerKey + " x" })},
		{"key file relative", "bans.crowdsec.api_key", `bans.crowdsec.api_key_file = "crowdsec.key" is not an absolute path`, with(func(b *BansConfig) { b.CrowdSec.APIKey, b.CrowdSec.APIKeyFile = "", "crowdsec.key" })},
		{"key file missing", "bans.crowdsec.api_key", "bans.crowdsec.api_key_file: ", with(func(b *BansConfig) { b.CrowdSec.APIKey, b.CrowdSec.APIKeyFile = "", filepath.Join(dir, "none.key") })},
		{"key file empty", "bans.crowdsec.api_key", "bans.crowdsec.api_key_file: " + emptyKey + ": the key is empty", with(func(b *BansConfig) { b.CrowdSec.APIKey, b.CrowdSec.APIKeyFile = "", emptyKey })},
		{"interval short", "bans.crowdsec.interval", `bans.crowdsec.interval = "10ms" is out of range; poll the LAPI every 100ms to 1h0m0s`, with(func(b *BansConfig) { b.CrowdSec.Interval = config.Duration(10 * time.Millisecond) })},
		{"resync under interval", "bans.crowdsec.resync", `bans.crowdsec.resync = "5s" is out of range; pull the full list every interval (10s) to 24h0m0s (default "15m0s")`, with(func(b *BansConfig) { b.CrowdSec.Resync = config.Duration(5 * time.Second) })},
		{"resync too long", "bans.crowdsec.resync", `bans.crowdsec.resync = "48h0m0s" is out of range`, with(func(b *BansConfig) { b.CrowdSec.Resync = config.Duration(48 * time.Hour) })},
		{"types empty", "bans.crowdsec.types", "bans.crowdsec.types is empty", with(func(b *BansConfig) { b.CrowdSec.Types = []string{} })},
		{"types twice", "bans.crowdsec.types", `bans.crowdsec.types: "ban" is listed twice`, with(func(b *BansConfig) { b.CrowdSec.Types = []string{"ban", "ban"} })},
		{"max negative", "bans.max", "bans.max = -1 is out of range; bans in force at once, per family, are 1-1000000 (default 100000)", with(func(b *BansConfig) { b.Max = -1 })},
		{"max too large", "bans.max", "bans.max = 1000001 is out of range", with(func(b *BansConfig) { b.Max = MaxBansMax + 1 })},
		{"allow prefix", "bans.allow_prefix", `bans.allow_prefix: "192.0.2.300/24" is not an address prefix`, with(func(b *BansConfig) { b.AllowPrefix = []string{"192.0.2.300/24"} })},
		{"allow file line", "bans.allow_prefix_file", "bans.allow_prefix_file: " + badAllow + `:2: "not-a-prefix" is not an address prefix or address`, with(func(b *BansConfig) { b.AllowPrefixFile = []string{badAllow} })},
		{"allow too many", "bans.allow_prefix", "bans.allow_prefix and allow_prefix_file allow 16,385 IPv4 and 0 IPv6 prefixes; at most 16,384 a family fit the ban maps", with(func(b *BansConfig) { b.AllowPrefixFile = []string{manyAllowed} })},
		{"allow whole IPv4", "bans.allow_prefix", `bans.allow_prefix: "0.0.0.0/0" allows a whole address family, so no ban of it would ever drop: give the prefixes of your management networks instead`,
			with(func(b *BansConfig) { b.AllowPrefix = []string{"192.0.2.0/24", "0.0.0.0/0"} })},
		{"allow file whole IPv6", "bans.allow_prefix_file", "bans.allow_prefix_file: " + wholeAllow + `:3: "::/0" allows a whole address family, so no ban of it would ever drop`, with(func(b *BansConfig) { b.AllowPrefixFile = []string{wholeAllow} })},
		{"allow file relative", "bans.allow_prefix_file", `bans.allow_prefix_file: "allow.txt" is not an absolute path`, with(func(b *BansConfig) { b.AllowPrefixFile = []string{"allow.txt"} })},
		{"tls ca missing", "bans.crowdsec.tls_ca", "bans.crowdsec: tls_ca, tls_cert, tls_key: ", with(func(b *BansConfig) {
			b.CrowdSec.URL = "https://lapi:8080/"
			b.CrowdSec.ClientConfig = tls.ClientConfig{TLSCA: filepath.Join(dir, "none.pem")}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := bansPlugin(tc.bans).Init()
			require.Error(t, err)
			errs := Errors(err)
			require.Len(t, errs, 1, "%v", err)
			var opt *OptionError
			require.True(t, errors.As(errs[0], &opt), "%T: %v", errs[0], errs[0])
			require.Equal(t, tc.key, opt.Key)
			require.Contains(t, err.Error(), tc.msg)
			require.NotContains(t, err.Error(), testBouncerKey, "the key is never echoed")
		})
	}
}

func mustUnion(t *testing.T, a *allowList) []netip.Prefix {
	t.Helper()
	all, err := a.union()
	require.NoError(t, err)
	return all
}
