//go:build linux

package bans

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// TestDetectEventsBounded: a gather emits at most MaxEvents events;
// the rest are counted in events_unreported, and the next gather starts
// afresh.
func TestDetectEventsBounded(t *testing.T) {
	set := &DetectSettings{PPS: 1000, For: 2 * time.Second, Duration: time.Minute, MaxDuration: time.Hour, DryRun: true}
	d, err := newDetection(&Settings{Max: 1000, Detect: set}, testLog{})
	require.NoError(t, err)
	now := time.Now()
	for i := range MaxEvents + 50 {
		p := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
		d.record(now, detect.Event{Kind: detect.Ban, Source: p, PPS: 2000, Duration: time.Minute, Offence: 1})
	}
	got := d.takeEvents(nil)
	require.Len(t, got, MaxEvents)
	require.Equal(t, Event{Kind: "ban", Source: netip.MustParsePrefix("10.0.0.0/24"), PPS: 2000, Duration: time.Minute, Offence: 1}, got[0])
	require.Equal(t, int64(50), d.counts.unreported)
	require.Equal(t, int64(MaxEvents+50), d.counts.added)
	d.record(now, detect.Event{Kind: detect.Expire, Source: netip.MustParsePrefix("10.0.0.0/24"), Duration: time.Minute, Offence: 1})
	got = d.takeEvents(nil)
	require.Len(t, got, 1)
	require.Equal(t, "expire", got[0].Kind)
}

// TestGuardsAllowAndLAPI: the guards refuse what overlaps an allowed
// prefix (as the bans have them in force, files changed included) or the
// LAPI's address, and nothing else.
func TestGuardsAllowAndLAPI(t *testing.T) {
	g := newGuards(&Settings{LAPI: "http://[2001:db8::10]:8080/"})
	require.Equal(t, "2001:db8::10", g.lapi)
	got, err := resolve(g.lapi)
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("2001:db8::10")}, got)
	// The host's addresses and gateways are the namespace's (TestDetectGuards).
	g.list = []guard{{netip.MustParsePrefix("2001:db8::10/128"), "the CrowdSec LAPI 2001:db8::10"}}
	require.Equal(t, "the CrowdSec LAPI 2001:db8::10", g.check(netip.MustParsePrefix("2001:db8::/64")))
	require.Empty(t, g.check(netip.MustParsePrefix("192.0.2.0/24")))
	g.setAllow([]netip.Prefix{netip.MustParsePrefix("192.0.2.128/25")})
	require.Equal(t, "allow_prefix 192.0.2.128/25", g.check(netip.MustParsePrefix("192.0.2.0/24")), "a ban that covers an allowed prefix is refused")
	require.Empty(t, g.check(netip.MustParsePrefix("203.0.113.0/24")))
	many := make([]netip.Prefix, 20)
	for i := range many {
		many[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
	}
	require.Equal(t, "allow_prefix (20 prefixes), the host's address 127.0.0.1", describeGuards(many, []guard{{netip.MustParsePrefix("127.0.0.1/32"), "the host's address 127.0.0.1"}}))
}

// TestGuardsCanonical: a candidate and the guards are compared in one
// family: an IPv4-mapped candidate is refused by the IPv4 guard it
// would ban, a mapped allow_prefix guards its IPv4 prefix, and an IPv6
// candidate holding the mapped block is refused with why.
func TestGuardsCanonical(t *testing.T) {
	g := newGuards(&Settings{Allow: []netip.Prefix{netip.MustParsePrefix("::ffff:192.0.2.0/120")}})
	g.list = []guard{addrGuard(netip.MustParseAddr("::ffff:10.77.0.254"), "the default gateway ")}
	require.Equal(t, "the default gateway 10.77.0.254", g.list[0].what)
	require.Equal(t, "the default gateway 10.77.0.254", g.check(netip.MustParsePrefix("::ffff:10.77.0.254/128")))
	require.Equal(t, "the default gateway 10.77.0.254", g.check(netip.MustParsePrefix("::ffff:10.77.0.0/112")), "10.77.0.0/16")
	require.Equal(t, "the default gateway 10.77.0.254", g.check(netip.MustParsePrefix("10.77.0.0/24")))
	require.Equal(t, "allow_prefix 192.0.2.0/24", g.check(netip.MustParsePrefix("192.0.2.7/32")))
	require.Equal(t, "allow_prefix 192.0.2.0/24", g.check(netip.MustParsePrefix("::ffff:192.0.2.7/128")))
	require.Contains(t, g.check(netip.MustParsePrefix("::/64")), "holds the IPv4-mapped addresses ::ffff:0:0/96")
	require.Empty(t, g.check(netip.MustParsePrefix("::ffff:198.51.100.7/128")))
	require.Empty(t, g.check(netip.MustParsePrefix("2001:db8::/64")))
}

// TestResolvers: the nameserver lines of a resolver file, IPv4 and IPv6,
// a zone dropped, mapped ones as IPv4; the rest ignored; no file, none.
func TestResolvers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(path, []byte("# nameserver 192.0.2.1\nsearch example.org\nnameserver 10.0.0.53\n  nameserver\tfe80::1%eth0 \nnameserver ::ffff:192.0.2.53\nnameserver not-an-address\nnameserver\noptions ndots:2\nnameserver 2001:db8::53\n"), 0o644))
	got, err := resolvers(path)
	require.NoError(t, err)
	var what []string
	for _, x := range got {
		what = append(what, x.prefix.String()+" "+x.what)
	}
	require.Equal(t, []string{
		"10.0.0.53/32 the resolver 10.0.0.53", "fe80::1/128 the resolver fe80::1",
		"192.0.2.53/32 the resolver 192.0.2.53", "2001:db8::53/128 the resolver 2001:db8::53",
	}, what)
	got, err = resolvers(filepath.Join(t.TempDir(), "absent"))
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestResolvConfOf: a namespace of ip netns's reads
// /etc/netns/<name>/resolv.conf when it exists, as ip netns exec mounts
// it; a process's namespace reads that process's file; else
// /etc/resolv.conf.
func TestResolvConfOf(t *testing.T) {
	have := map[string]bool{"/etc/netns/edge/resolv.conf": true, "/proc/42/root/etc/resolv.conf": true}
	exists := func(p string) bool { return have[p] }
	for ns, want := range map[string]string{
		"":                    "/etc/resolv.conf",
		"edge":                "/etc/netns/edge/resolv.conf",
		"/var/run/netns/edge": "/etc/netns/edge/resolv.conf",
		"/run/netns/edge":     "/etc/netns/edge/resolv.conf",
		"other":               "/etc/resolv.conf",
		"/proc/42/ns/net":     "/proc/42/root/etc/resolv.conf",
		"/proc/43/ns/net":     "/etc/resolv.conf",
		"/srv/ns/edge":        "/etc/resolv.conf",
	} {
		require.Equal(t, want, resolvConfOf("/etc", ns, exists), ns)
	}
}

// TestDetectBansDryRun: the bans' dry run makes the detection one,
// whatever its own says: a ban is logged "would have banned" and
// offered to no push.
func TestDetectBansDryRun(t *testing.T) {
	set := &DetectSettings{PPS: 1000, For: 2 * time.Second, Duration: time.Minute, MaxDuration: time.Hour,
		Push: true, Login: "m", Password: "p"}
	log := &infoLog{}
	d, err := newDetection(&Settings{Max: 10, DryRun: true, LAPI: "http://127.0.0.1:1/", Detect: set}, log)
	require.NoError(t, err)
	require.True(t, d.set.DryRun)
	require.False(t, set.DryRun, "the caller's settings are left alone")
	d.record(time.Now(), detect.Event{Kind: detect.Ban, Source: netip.MustParsePrefix("10.2.2.2/32"), PPS: 2000, Duration: time.Minute, Offence: 1})
	require.Len(t, log.infos, 1)
	require.Contains(t, log.infos[0], "bans: detect: would have banned 10.2.2.2/32 ")
	require.Contains(t, log.infos[0], "(dry run: nothing dropped, nothing pushed)")
	require.Equal(t, int64(0), d.push.Stats().Waiting, "nothing offered to the LAPI")
}

// infoLog records the information lines the bans log.
type infoLog struct {
	testLog
	infos []string
}

func (l *infoLog) Infof(format string, args ...any) {
	l.infos = append(l.infos, fmt.Sprintf(format, args...))
}

// TestDetectRefusalsLogBounded: a flood of forged sources refused one by
// one fills no log: 10 lines a minute, then one that counts the rest,
// while every refusal is counted and is an event.
func TestDetectRefusalsLogBounded(t *testing.T) {
	set := &DetectSettings{PPS: 1000, For: 2 * time.Second, Duration: time.Minute, MaxDuration: time.Hour, DryRun: true}
	log := &warnLog{}
	d, err := newDetection(&Settings{Max: 1000, Detect: set}, log)
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	for i := range 60 {
		p := netip.MustParsePrefix(fmt.Sprintf("10.0.%d.1/32", i))
		d.record(now.Add(time.Duration(i)*time.Second/2), detect.Event{Kind: detect.Refused, Source: p, PPS: 2000, Reason: "its evidence is not verified, and unverified sources are not banned"})
	}
	require.Len(t, log.warnings, maxRefusalLines)
	d.record(now.Add(time.Minute), detect.Event{Kind: detect.Refused, Source: netip.MustParsePrefix("10.1.0.1/32"), PPS: 2000, Reason: "x"})
	require.Len(t, log.warnings, maxRefusalLines+2)
	require.Contains(t, log.warnings[maxRefusalLines], "50 more sources refused in the minute from ")
	require.Contains(t, log.warnings[maxRefusalLines+1], "not banning 10.1.0.1/32: x")
	require.Equal(t, int64(61), d.counts.refused)
	require.Len(t, d.takeEvents(nil), 61)
}
