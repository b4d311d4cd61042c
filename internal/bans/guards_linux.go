//go:build linux

package bans

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// guard is a prefix a detection never bans, and why.
type guard struct {
	prefix netip.Prefix
	what   string
}

// guards are what a detection must never ban: allow_prefix, the host's
// own addresses, the next hops of its routes and the gateways of its
// nexthop objects, and its resolvers in the plugin's namespace, and the
// LAPI (a ban of it would lock the fleet's
// bans out). Every prefix, guard or candidate, is compared canonical
// (Canonical: an IPv4-mapped IPv6 prefix as the IPv4 prefix the ban
// table would make of it), so one family holds them all. The
// addresses, routes, nexthop objects and resolvers are read again
// every minute.
type guards struct {
	ns         string // the network namespace: a name in /var/run/netns or a path; "" for the process's
	lapi       string // the LAPI's host; "" without one
	resolvConf string // the resolver file; "" for the namespace's (resolvConfOf)

	mu     sync.Mutex
	allow  []netip.Prefix // allow_prefix and its files, as the bans have them in force, canonical
	list   []guard        // the host's addresses, next hops, nexthop gateways, resolvers and the LAPI
	logged string         // the guards last logged
}

func newGuards(bs *Settings) *guards {
	g := &guards{ns: bs.Namespace, allow: canonicalAll(bs.Allow), resolvConf: bs.ResolvConf}
	if u, err := url.Parse(bs.LAPI); err == nil && bs.LAPI != "" {
		g.lapi = u.Hostname()
	}
	return g
}

// check names why p must not be banned: the guard its canonical prefix
// overlaps, or why it has none ("" when it may be banned).
func (g *guards) check(p netip.Prefix) string {
	c, why := Canonical(p)
	if why != "" {
		return why
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.allow {
		if a.Overlaps(c) {
			return "allow_prefix " + a.String()
		}
	}
	for _, x := range g.list {
		if x.prefix.Overlaps(c) {
			return x.what
		}
	}
	return ""
}

// setAllow takes the allowed prefixes the bans put in force (a file of
// them changed).
func (g *guards) setAllow(allow []netip.Prefix) {
	allow = canonicalAll(allow)
	g.mu.Lock()
	g.allow = allow
	g.mu.Unlock()
}

func canonicalAll(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = canonicalGuard(p)
	}
	return out
}

// refresh reads the guards again and logs them when they changed; a
// part that fails to read keeps what it held and says why.
func (g *guards) refresh(log Logger) {
	var list []guard
	var problems []string
	err := nsthread.In(g.ns, func() error {
		host, err := hostAddresses()
		if err != nil {
			problems = append(problems, err.Error())
		}
		list = append(list, host...)
		hops, err := nextHops()
		if err != nil {
			problems = append(problems, err.Error())
		}
		list = append(list, hops...)
		objects, err := nexthopGateways()
		if err != nil {
			problems = append(problems, err.Error())
		}
		list = append(list, objects...)
		return nil
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	res, err := resolvers(g.resolvConfPath())
	if err != nil {
		problems = append(problems, err.Error())
	}
	list = append(list, res...)
	if g.lapi != "" {
		addrs, err := resolve(g.lapi)
		if err != nil {
			problems = append(problems, err.Error())
		}
		for _, a := range addrs {
			list = append(list, addrGuard(a, "the CrowdSec LAPI "))
		}
	}
	list = uniqueGuards(list)
	g.mu.Lock()
	if len(problems) > 0 && len(g.list) > 0 {
		list = mergeGuards(list, g.list) // keep what a failed read cannot confirm gone
	}
	g.list = list
	shown := describeGuards(g.allow, list)
	changed := shown != g.logged
	g.logged = shown
	g.mu.Unlock()
	if changed {
		log.Infof("bans: detect: never banned: %s", shown)
	}
	if len(problems) > 0 {
		log.Warnf("bans: detect: guards: %s; a source in them could be banned", strings.Join(problems, "; "))
	}
}

// addrGuard guards address a, canonical, as what followed by it.
func addrGuard(a netip.Addr, what string) guard {
	a = a.Unmap().WithZone("")
	return guard{netip.PrefixFrom(a, a.BitLen()), what + a.String()}
}

// hostAddresses are the addresses of every interface of the namespace.
func hostAddresses() ([]guard, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var out []guard
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, addrGuard(ip, "the host's address "))
		}
	}
	return out, nil
}

// nextHops are the gateways of every route of both families, in every
// routing table: those of the default routes first.
func nextHops() ([]guard, error) {
	var defaults, others []guard
	add := func(r *netlink.Route, gw net.IP, via netlink.Destination) {
		if v, ok := via.(*netlink.Via); ok && len(gw) == 0 {
			gw = v.Addr
		}
		ip, ok := netip.AddrFromSlice(gw)
		if !ok || !ip.IsValid() || ip.Unmap().IsUnspecified() {
			return
		}
		dst := "default"
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				dst = r.Dst.String()
			}
		}
		if dst == "default" {
			defaults = append(defaults, addrGuard(ip, "the default gateway "))
			return
		}
		x := addrGuard(ip, "the gateway ")
		x.what += " (route to " + dst + ")"
		others = append(others, x)
	}
	err := netlink.RouteListFilteredIter(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE, func(r netlink.Route) bool {
		add(&r, r.Gw, r.Via)
		for _, nh := range r.MultiPath {
			add(&r, nh.Gw, nh.Via)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list the routes: %w", err)
	}
	return append(defaults, others...), nil
}

// nhmsg is the header of a nexthop request (struct nhmsg): all zero, a
// dump of both families.
type nhmsg struct{}

func (nhmsg) Len() int          { return unix.SizeofNhmsg }
func (nhmsg) Serialize() []byte { return make([]byte, unix.SizeofNhmsg) }

// nexthopGateways are the gateways of every nexthop object of the
// namespace (ip nexthop), both families, whether a route uses one or
// not: a route that uses one carries its id alone when
// net.ipv4.nexthop_compat_mode is 0, so the routes do not name it. A
// group's members are objects of their own in the dump, so each
// member's gateway is among them; a blackhole has none. One dump, of
// one message per object, a minute: for 10,000 objects about 17 ms and
// 7 MB of garbage, and a guard each unless their gateways are shared
// (BenchmarkGuardsNexthopObjects).
func nexthopGateways() ([]guard, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETNEXTHOP, unix.NLM_F_DUMP)
	req.AddData(nhmsg{})
	var out []guard
	var bad error
	err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWNEXTHOP, func(msg []byte) bool {
		if len(msg) < unix.SizeofNhmsg {
			bad = fmt.Errorf("a nexthop message of %d bytes", len(msg))
			return false
		}
		attrs, err := nl.ParseRouteAttr(msg[unix.SizeofNhmsg:])
		if err != nil {
			bad = err
			return false
		}
		var id uint32
		var gw netip.Addr
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.NHA_ID:
				if len(a.Value) == 4 {
					id = native.Uint32(a.Value)
				}
			case unix.NHA_GATEWAY:
				gw, _ = netip.AddrFromSlice(a.Value) // 4 or 16 bytes: an IPv4 object may have an IPv6 gateway
			}
		}
		if gw.IsValid() && !gw.Unmap().IsUnspecified() {
			x := addrGuard(gw, "the gateway ")
			x.what += fmt.Sprintf(" (nexthop id %d)", id)
			out = append(out, x)
		}
		return true
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil, nil // a kernel without nexthop objects (before 5.3): no route can use one
	}
	if err == nil {
		err = bad
	}
	if err != nil {
		return out, fmt.Errorf("list the nexthop objects: %w", err)
	}
	return out, nil
}

// native is the host's byte order, that of netlink's integers.
var native = nl.NativeEndian()

// etcDir is where the host's /etc is; resolvConfOf reads under it.
const etcDir = "/etc"

// resolvConfPath is the resolver file the guards read.
func (g *guards) resolvConfPath() string {
	if g.resolvConf != "" {
		return g.resolvConf
	}
	return resolvConfOf(etcDir, g.ns, fileExists)
}

// resolvConfOf is the resolver file a process of namespace ns sees: for
// a namespace of ip netns's (a name, or a path in /var/run/netns or
// /run/netns), /etc/netns/<name>/resolv.conf when it exists (ip netns
// exec mounts it over /etc/resolv.conf); for /proc/<pid>/ns/net, that
// process's own /etc/resolv.conf; else /etc/resolv.conf.
func resolvConfOf(etc, ns string, exists func(string) bool) string {
	def := filepath.Join(etc, "resolv.conf")
	name := ns
	if strings.Contains(ns, "/") {
		name = ""
		dir, base := filepath.Split(filepath.Clean(ns))
		switch dir = filepath.Clean(dir); {
		case dir == "/var/run/netns" || dir == "/run/netns":
			name = base
		case strings.HasPrefix(ns, "/proc/") && base == "net" && strings.HasSuffix(dir, "/ns"):
			if own := filepath.Join(filepath.Dir(dir), "root/etc/resolv.conf"); exists(own) {
				return own
			}
		}
	}
	if name != "" && name != "." && name != ".." {
		if p := filepath.Join(etc, "netns", name, "resolv.conf"); exists(p) {
			return p
		}
	}
	return def
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// maxResolvConf bounds what is read of a resolver file.
const maxResolvConf = 64 << 10

// resolvers are the nameservers of the resolver file path, IPv4 and
// IPv6 (a zone dropped); a missing file has none.
func resolvers(path string) ([]guard, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the resolvers: %w", err)
	}
	defer f.Close()
	var out []guard
	sc := bufio.NewScanner(io.LimitReader(f, maxResolvConf))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		host, _, _ := strings.Cut(fields[1], "%")
		if a, err := netip.ParseAddr(host); err == nil {
			out = append(out, addrGuard(a, "the resolver "))
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read the resolvers of %s: %w", path, err)
	}
	return out, nil
}

// resolve is host's addresses: itself when it is one.
func resolve(host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve the LAPI's host %s: %w", quote.Value(host), err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

// uniqueGuards keeps the first guard of each prefix.
func uniqueGuards(list []guard) []guard {
	seen := make(map[netip.Prefix]bool, len(list))
	out := list[:0]
	for _, x := range list {
		if !seen[x.prefix] {
			seen[x.prefix] = true
			out = append(out, x)
		}
	}
	return out
}

func mergeGuards(a, b []guard) []guard {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}

// maxGuardsShown bounds the guards the log names one by one (a router's
// next hops can be many).
const maxGuardsShown = 32

// describeGuards lists the guards for the log; a long allow list is
// counted, not listed, and past maxGuardsShown guards the rest are.
func describeGuards(allow []netip.Prefix, list []guard) string {
	var parts []string
	switch {
	case len(allow) > 8:
		parts = append(parts, fmt.Sprintf("allow_prefix (%d prefixes)", len(allow)))
	default:
		for _, a := range allow {
			parts = append(parts, "allow_prefix "+a.String())
		}
	}
	for i, x := range list {
		if i == maxGuardsShown {
			parts = append(parts, fmt.Sprintf("and %d more", len(list)-maxGuardsShown))
			break
		}
		parts = append(parts, x.what)
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
