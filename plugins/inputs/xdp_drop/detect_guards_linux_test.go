//go:build linux

package xdp_drop

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// addressDev puts addrs on the test veth, brings it up and adds routes,
// each a destination ("" for the default) and its next hop.
func addressDev(t *testing.T, ns *testns.NS, addrs []string, routes [][2]string) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		h := ns.Netlink()
		link, err := h.LinkByName(testns.Dev)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if addr.IP.To4() == nil {
				// The namespace has IPv6 off; on for the test veth alone.
				if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+testns.Dev+"/disable_ipv6", []byte("0"), 0); err != nil {
					return err
				}
			}
			addr.Flags = unix.IFA_F_NODAD // usable at once: a route's next hop is on it
			if err := h.AddrAdd(link, addr); err != nil {
				return err
			}
		}
		if err := h.LinkSetUp(link); err != nil {
			return err
		}
		for _, r := range routes {
			route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(r[1])}
			if r[0] != "" {
				_, dst, err := net.ParseCIDR(r[0])
				if err != nil {
					return err
				}
				route.Dst = dst
			}
			if err := h.RouteAdd(route); err != nil {
				return err
			}
		}
		return nil
	}))
}

// floodRefused floods srcs until want sources are decided (banned or
// refused: a guard that fails lets one through and the test ends), then
// three seconds more (each refusal is said once per duration); it
// returns the refused sources and how often each was refused.
func floodRefused(t *testing.T, ns *testns.NS, p *XDPDrop, srcs []string, want int) map[string]int {
	t.Helper()
	var refused []telegraf.Metric
	added := int64(0)
	collect := func() {
		ban, events := gatherDetect(t, ns, p)
		added = field(ban.Fields(), FieldAdded)
		for _, e := range events {
			if e.Tags()[TagEvent] == EventRefused {
				refused = append(refused, e)
			}
		}
	}
	flood(t, ns, srcs, 5000, func() bool { collect(); return int(added)+len(refused) >= want })
	more := time.Now().Add(3 * time.Second)
	flood(t, ns, srcs, 5000, func() bool { collect(); return time.Now().After(more) })
	logLines(t, refused...)
	sources := map[string]int{}
	for _, e := range refused {
		sources[e.Fields()[FieldSource].(string)]++
	}
	return sources
}

// logged is the lines of log holding s.
func logged(log *recordLog, s string) []string {
	var out []string
	for _, l := range log.all() {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// TestDetectGuardsMapped: with top_source_prefix_ipv6 = 128, an IPv6
// flood from ::ffff:<the default gateway> is refused as the gateway (the
// ban table would make an IPv4 ban of it), under the IPv4 prefix the
// kernel would enforce; afterwards every frame of the gateway's, IPv4
// and mapped, passes, while a flood from elsewhere in the same run is
// banned.
func TestDetectGuardsMapped(t *testing.T) {
	ns := testns.New(t)
	addressDev(t, ns, []string{"10.77.0.1/24"}, [][2]string{{"", "10.77.0.254"}})
	log := &recordLog{}
	p := detectPlugin(&DetectConfig{PPS: 500, DryRun: enforce(), UnverifiedAction: "drop"}, nil)
	p.TopSourcePrefixV6, p.Log = 128, log
	require.Empty(t, startPlugin(t, ns, p).Errors)
	sources := floodRefused(t, ns, p, []string{"::ffff:10.77.0.254", "2001:db8::77"}, 2)
	require.Equal(t, map[string]int{"10.77.0.254/32": 1}, sources)
	require.Len(t, logged(log, "not banning 10.77.0.254/32: the default gateway 10.77.0.254 "), 1)
	require.Empty(t, logged(log, "banned ::ffff:"), "a mapped source is named as the kernel would enforce it")
	ban, _ := gatherDetect(t, ns, p)
	require.Equal(t, int64(1), field(ban.Fields(), FieldActive), "2001:db8::77 alone")
	require.Equal(t, int64(1), field(ban.Fields(), FieldRefused))
	sendBanFlows(t, ns,
		banFlow{"10.77.0.254", 200, 200}, banFlow{"::ffff:10.77.0.254", 200, 200},
		banFlow{"2001:db8::77", 100, 0},
	)
}

// TestDetectGuardsRoutesAndResolvers: the next hops of routes other than
// the default, IPv4 and IPv6, and the resolvers of the namespace's
// resolver file (a zone dropped) are never banned: each refused once
// with its reason, while a flood from elsewhere is banned; the guarded
// set is logged at start.
func TestDetectGuardsRoutesAndResolvers(t *testing.T) {
	ns := testns.New(t)
	addressDev(t, ns, []string{"10.9.0.1/24", "2001:db8:9::1/64"},
		[][2]string{{"10.99.0.0/16", "10.9.0.2"}, {"2001:db8:99::/48", "2001:db8:9::2"}})
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, []byte("# by the test\nsearch example.org\nnameserver 10.9.0.53\nnameserver fe80::53%eth0\nnameserver 2001:db8:9::53\noptions ndots:2\n"), 0o644))
	log := &recordLog{}
	p := detectPlugin(&DetectConfig{PPS: 500, DryRun: enforce(), UnverifiedAction: "drop"}, nil)
	p.TopSourcePrefixV4, p.TopSourcePrefixV6, p.Log, p.Run.ResolvConf = 32, 128, log, resolv
	require.Empty(t, startPlugin(t, ns, p).Errors)
	start := logged(log, "never banned: ")
	require.Len(t, start, 1)
	for _, want := range []string{
		"the gateway 10.9.0.2 (route to 10.99.0.0/16)", "the gateway 2001:db8:9::2 (route to 2001:db8:99::/48)",
		"the resolver 10.9.0.53", "the resolver fe80::53", "the resolver 2001:db8:9::53",
	} {
		require.Contains(t, start[0], want)
	}
	guarded := []string{"10.9.0.2", "2001:db8:9::2", "10.9.0.53", "fe80::53", "2001:db8:9::53"}
	sources := floodRefused(t, ns, p, append(guarded, "10.9.0.77"), 6)
	require.Equal(t, map[string]int{
		"10.9.0.2/32": 1, "2001:db8:9::2/128": 1, "10.9.0.53/32": 1, "fe80::53/128": 1, "2001:db8:9::53/128": 1,
	}, sources)
	require.Len(t, logged(log, "not banning 10.9.0.2/32: the gateway 10.9.0.2 (route to 10.99.0.0/16)"), 1)
	require.Len(t, logged(log, "not banning 2001:db8:9::53/128: the resolver 2001:db8:9::53"), 1)
	ban, _ := gatherDetect(t, ns, p)
	require.Equal(t, int64(1), field(ban.Fields(), FieldActive), "the one from elsewhere")
	require.Equal(t, int64(5), field(ban.Fields(), FieldRefused))
	flows := []banFlow{{"10.9.0.77", 100, 0}}
	for _, g := range guarded {
		flows = append(flows, banFlow{g, 100, 100})
	}
	sendBanFlows(t, ns, flows...)
}

// TestDetectGuardsNexthopObjects: with net.ipv4.nexthop_compat_mode = 0
// in the namespace, routes by nexthop object (an IPv4 default route, a
// route through a group, an IPv6 default route) carry only the objects'
// ids, yet their gateways, a group's members included, are never
// banned: each refused once as its object's gateway, its frames all
// passing, while a flood from elsewhere is banned.
func TestDetectGuardsNexthopObjects(t *testing.T) {
	ns := testns.New(t)
	addressDev(t, ns, []string{"10.9.0.1/24", "2001:db8:9::1/64"}, nil)
	require.NoError(t, ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/nexthop_compat_mode", []byte("0"), 0) // the namespace's own
	}))
	cmd := ns.Exec("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.ReplaceAll(`nexthop add id 7 via 10.9.0.254 dev DEV
nexthop add id 8 via 10.9.0.253 dev DEV
nexthop add id 9 via 10.9.0.252 dev DEV
nexthop add id 20 group 8/9
nexthop add id 11 via 2001:db8:9::fe dev DEV
route add default nhid 7
route add 10.50.0.0/16 nhid 20
route add ::/0 nhid 11
`, "DEV", testns.Dev))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", testns.Cmdline(cmd), out)
	routes := ns.Exec("ip", "-4", "route", "show", "default")
	out, err = routes.Output()
	require.NoError(t, err)
	require.Equal(t, "default nhid 7 \n", string(out), "the route names no gateway")
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, nil, 0o644))
	log := &recordLog{}
	p := detectPlugin(&DetectConfig{PPS: 500, DryRun: enforce(), UnverifiedAction: "drop"}, nil)
	p.TopSourcePrefixV4, p.TopSourcePrefixV6, p.Log, p.Run.ResolvConf = 32, 128, log, resolv
	require.Empty(t, startPlugin(t, ns, p).Errors)
	start := logged(log, "never banned: ")
	require.Len(t, start, 1)
	for _, want := range []string{
		"the gateway 10.9.0.254 (nexthop id 7)", "the gateway 10.9.0.253 (nexthop id 8)",
		"the gateway 10.9.0.252 (nexthop id 9)", "the gateway 2001:db8:9::fe (nexthop id 11)",
	} {
		require.Contains(t, start[0], want)
	}
	guarded := []string{"10.9.0.254", "10.9.0.253", "2001:db8:9::fe"}
	sources := floodRefused(t, ns, p, append(guarded, "10.9.0.77"), 4)
	require.Equal(t, map[string]int{"10.9.0.254/32": 1, "10.9.0.253/32": 1, "2001:db8:9::fe/128": 1}, sources)
	require.Len(t, logged(log, "not banning 10.9.0.254/32: the gateway 10.9.0.254 (nexthop id 7)"), 1)
	require.Len(t, logged(log, "not banning 10.9.0.253/32: the gateway 10.9.0.253 (nexthop id 8)"), 1)
	ban, _ := gatherDetect(t, ns, p)
	require.Equal(t, int64(1), field(ban.Fields(), FieldActive), "the one from elsewhere")
	require.Equal(t, int64(3), field(ban.Fields(), FieldRefused))
	flows := []banFlow{{"10.9.0.77", 100, 0}}
	for _, g := range guarded {
		flows = append(flows, banFlow{g, 100, 100})
	}
	sendBanFlows(t, ns, flows...)
}

// alertCounter is a proxy to the LAPI at target that counts the alerts
// posted through it.
func alertCounter(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	var n atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/alerts") {
			n.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/", &n
}

// TestDetectDryRunImplied: [bans] dry_run = true, or the plugin's
// dry_run = true, makes the detection a dry run whatever
// bans.detect.dry_run says: with crowdsec_push = true and a real LAPI, a
// source over the rate is logged "would have banned", its frames all
// pass, nothing is in the kernel's table, and no alert is posted
// (pushed 0, the LAPI holds none). A push of the ban takes well under a
// second; the test waits five for one.
func TestDetectDryRunImplied(t *testing.T) {
	l := lapi.Start(t)
	pwFile := filepath.Join(t.TempDir(), "machine.pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("edge-pass-word\n"), 0o600))
	l.Cscli("machines", "add", "xdp-drop-edge1", "--password", "edge-pass-word", "--force", "-f", filepath.Join(t.TempDir(), "creds.yaml"))
	key := l.AddBouncer("xdp-drop-edge1")
	via, posted := alertCounter(t, l.URL())
	for _, tc := range []struct {
		name       string
		pluginDry  bool
		bansDryRun bool
	}{{"bans.dry_run", false, true}, {"dry_run", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testns.New(t)
			log := &recordLog{}
			p := detectPlugin(&DetectConfig{
				PPS: 1000, DryRun: enforce(), PushUnverified: true, // a UDP flood: pushed but for the dry run
				CrowdSecPush: true, CrowdSecLogin: "xdp-drop-edge1", CrowdSecPasswordFile: pwFile,
			}, &BansConfig{DryRun: tc.bansDryRun, CrowdSec: &CrowdSecConfig{URL: via, APIKey: key, Interval: config.Duration(testBanInterval)}})
			p.Log, p.DryRun = log, tc.pluginDry
			if tc.pluginDry {
				p.SampleActions = []string{ActionWouldDrop, ActionPass}
			}
			require.Empty(t, startPlugin(t, ns, p).Errors)
			flood(t, ns, []string{"198.51.100.7"}, 10_000, func() bool {
				ban, _ := gatherDetectQuiet(t, ns, p)
				return field(ban.Fields(), FieldAdded) > 0
			})
			var f map[string]any
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				ban, _ := gatherDetectQuiet(t, ns, p)
				if f = ban.Fields(); field(f, FieldPushed)+field(f, FieldPushFailed) > 0 {
					break
				}
			}
			require.Equal(t, int64(0), field(f, FieldPushed), "%v", f)
			require.Equal(t, int64(0), field(f, FieldPushFailed), "%v", f)
			require.Equal(t, int64(0), posted.Load(), "alerts posted to the LAPI")
			var alerts []json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(l.Cscli("alerts", "list", "-o", "json")), &alerts))
			require.Empty(t, alerts, "the LAPI's alerts")
			require.Len(t, logged(log, "bans: detect: would have banned 198.51.100.7/32 "), 1)
			require.Empty(t, logged(log, "bans: detect: banned "))
			sendBanFlows(t, ns, banFlow{"198.51.100.7", 200, 200})
			require.Zero(t, banCounter(t, p, bpf.BanDrop))
			require.Zero(t, banCounter(t, p, bpf.BanWouldDrop), "nothing in the kernel's table")
			ban, _ := gatherDetect(t, ns, p)
			require.Equal(t, ActionWouldDrop, ban.Tags()[TagAction])
			require.Equal(t, int64(1), field(ban.Fields(), FieldActive))
		})
	}
}
