//go:build linux

package bans

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// recordLog records what the guards log.
type recordLog struct{ infos, warnings []string }

func (l *recordLog) Infof(format string, args ...any) {
	l.infos = append(l.infos, fmt.Sprintf(format, args...))
}

func (l *recordLog) Warnf(format string, args ...any) {
	l.warnings = append(l.warnings, fmt.Sprintf(format, args...))
}

const compatMode = "/proc/sys/net/ipv4/nexthop_compat_mode"

// nexthopRoutes sets net.ipv4.nexthop_compat_mode to 0 in the test
// namespace alone (it is the namespace's own), addresses its veth and
// runs ip's batch of nexthop objects and routes in it.
func nexthopRoutes(t testing.TB, ns *testns.NS, batch string) {
	t.Helper()
	host, err := os.ReadFile(compatMode)
	require.NoError(t, err)
	require.NoError(t, ns.Do(func() error {
		if err := os.WriteFile(compatMode, []byte("0"), 0); err != nil {
			return err
		}
		// The namespace has IPv6 off; on for the test veth alone.
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+testns.Dev+"/disable_ipv6", []byte("0"), 0)
	}))
	var there []byte
	require.NoError(t, ns.Do(func() error {
		var err error
		there, err = os.ReadFile(compatMode)
		return err
	}))
	require.Equal(t, "0\n", string(there), "the test namespace's compat mode")
	after, err := os.ReadFile(compatMode)
	require.NoError(t, err)
	require.Equal(t, string(host), string(after), "the initial namespace's compat mode is untouched")
	cmd := ns.Exec("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", testns.Cmdline(cmd), out)
}

// TestGuardsNexthopObjects: with net.ipv4.nexthop_compat_mode = 0 the
// routes that use nexthop objects (a default route of each family, a
// route through a group, an IPv4 route through an IPv6 gateway) name no
// gateway, yet the guards hold the gateway of every object, a group's
// members and an object no route uses included; a blackhole adds none.
func TestGuardsNexthopObjects(t *testing.T) {
	ns := testns.New(t)
	nexthopRoutes(t, ns, strings.ReplaceAll(`link set lo up
address add 10.9.0.1/24 dev DEV
address add 2001:db8:9::1/64 dev DEV nodad
nexthop add id 7 via 10.9.0.254 dev DEV
nexthop add id 8 via 10.9.0.253 dev DEV
nexthop add id 9 via 10.9.0.252 dev DEV
nexthop add id 20 group 8/9
nexthop add id 11 via 2001:db8:9::fe dev DEV
nexthop add id 12 via inet6 2001:db8:9::fd dev DEV
nexthop add id 13 via 10.9.0.251 dev DEV
nexthop add id 14 blackhole
route add default nhid 7
route add 10.50.0.0/16 nhid 20
route add 10.60.0.0/16 nhid 12
route add 10.70.0.0/16 nhid 14
route add ::/0 nhid 11
`, "DEV", testns.Dev))

	var hops []guard
	require.NoError(t, ns.Do(func() error {
		var err error
		hops, err = nextHops()
		return err
	}))
	require.Empty(t, hops, "the routes carry only the objects' ids")

	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, nil, 0o644))
	g := newGuards(&Settings{Namespace: ns.Path, ResolvConf: resolv})
	log := &recordLog{}
	g.refresh(log)
	require.Empty(t, log.warnings)
	var objects []string
	for _, x := range g.list {
		if strings.Contains(x.what, "(nexthop id ") {
			objects = append(objects, x.prefix.String()+" "+x.what)
		}
	}
	require.Equal(t, []string{
		"10.9.0.254/32 the gateway 10.9.0.254 (nexthop id 7)",
		"10.9.0.253/32 the gateway 10.9.0.253 (nexthop id 8)",
		"10.9.0.252/32 the gateway 10.9.0.252 (nexthop id 9)",
		"2001:db8:9::fe/128 the gateway 2001:db8:9::fe (nexthop id 11)",
		"2001:db8:9::fd/128 the gateway 2001:db8:9::fd (nexthop id 12)",
		"10.9.0.251/32 the gateway 10.9.0.251 (nexthop id 13)",
	}, objects)
	require.Len(t, log.infos, 1)
	require.Contains(t, log.infos[0], "bans: detect: never banned: ")
	require.Contains(t, log.infos[0], "the gateway 10.9.0.254 (nexthop id 7)")
	for src, want := range map[string]string{
		"10.9.0.254/32":         "the gateway 10.9.0.254 (nexthop id 7)",
		"10.9.0.252/32":         "the gateway 10.9.0.252 (nexthop id 9)",
		"::ffff:10.9.0.253/128": "the gateway 10.9.0.253 (nexthop id 8)",
		"2001:db8:9::fd/128":    "the gateway 2001:db8:9::fd (nexthop id 12)",
		"10.9.0.251/32":         "the gateway 10.9.0.251 (nexthop id 13)",
		"10.9.0.77/32":          "",
		"2001:db8:9::77/128":    "",
	} {
		require.Equal(t, want, g.check(netip.MustParsePrefix(src)), src)
	}
}

// BenchmarkGuardsNexthopObjects: a refresh of the guards in a namespace
// of 10,000 nexthop objects, each its own gateway, and 10,000 routes by
// them (a router's worth); of the nexthop dump alone; of a check against
// all their guards.
func BenchmarkGuardsNexthopObjects(b *testing.B) {
	ns := testns.New(b)
	var batch strings.Builder
	fmt.Fprintf(&batch, "address add 10.9.0.1/16 dev %s\n", testns.Dev)
	const objects = 10_000
	for i := range objects {
		fmt.Fprintf(&batch, "nexthop add id %d via 10.9.%d.%d dev %s\n", i+1, (i+2)/256, (i+2)%256, testns.Dev)
		fmt.Fprintf(&batch, "route add 10.%d.%d.0/24 nhid %d\n", 100+i/256, i%256, i+1)
	}
	nexthopRoutes(b, ns, batch.String())
	resolv := filepath.Join(b.TempDir(), "resolv.conf")
	require.NoError(b, os.WriteFile(resolv, nil, 0o644))
	g := newGuards(&Settings{Namespace: ns.Path, ResolvConf: resolv})
	b.Run("refresh", func(b *testing.B) {
		for b.Loop() {
			g.refresh(testLog{})
		}
	})
	n := 0
	for _, x := range g.list {
		if strings.Contains(x.what, "(nexthop id ") {
			n++
		}
	}
	require.Equal(b, objects, n)
	b.Run("dump", func(b *testing.B) {
		require.NoError(b, ns.Do(func() error {
			for b.Loop() {
				if _, err := nexthopGateways(); err != nil {
					return err
				}
			}
			return nil
		}))
	})
	b.Run("check", func(b *testing.B) {
		p := netip.MustParsePrefix("198.51.100.7/32")
		for b.Loop() {
			if g.check(p) != "" {
				b.Fatal("guarded")
			}
		}
	})
}

// TestDescribeGuardsBounded: the log names at most maxGuardsShown guards,
// then counts the rest.
func TestDescribeGuardsBounded(t *testing.T) {
	var list []guard
	for i := range maxGuardsShown + 5 {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		list = append(list, guard{netip.PrefixFrom(a, 32), "the gateway " + a.String()})
	}
	got := describeGuards(nil, list)
	require.True(t, strings.HasSuffix(got, ", and 5 more"), got)
	require.Equal(t, maxGuardsShown+1, strings.Count(got, ", ")+1)
}
