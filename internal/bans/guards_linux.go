//go:build linux

package bans

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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
// own addresses and its default gateways in the plugin's namespace, and
// the LAPI (a ban of it would lock the fleet's bans out). The addresses
// and routes are read again every minute.
type guards struct {
	ns   string // the network namespace: a name in /var/run/netns or a path; "" for the process's
	lapi string // the LAPI's host; "" without one

	mu     sync.Mutex
	allow  []netip.Prefix // allow_prefix and its files, as the bans have them in force
	list   []guard        // the host's addresses, gateways and the LAPI
	logged string         // the guards last logged
}

func newGuards(ns string, allow []netip.Prefix, lapiURL string) *guards {
	g := &guards{ns: ns, allow: allow}
	if u, err := url.Parse(lapiURL); err == nil && lapiURL != "" {
		g.lapi = u.Hostname()
	}
	return g
}

// check names the guard p overlaps ("" for none).
func (g *guards) check(p netip.Prefix) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.allow {
		if a.Overlaps(p) {
			return "allow_prefix " + a.String()
		}
	}
	for _, x := range g.list {
		if x.prefix.Overlaps(p) {
			return x.what
		}
	}
	return ""
}

// setAllow takes the allowed prefixes the bans put in force (a file of
// them changed).
func (g *guards) setAllow(allow []netip.Prefix) {
	g.mu.Lock()
	g.allow = allow
	g.mu.Unlock()
}

// refresh reads the guards again and logs them when they changed; a
// part that fails to read keeps what it held and says why.
func (g *guards) refresh(log Logger) {
	var list []guard
	var problems []string
	err := inNamespace(g.ns, func() error {
		host, err := hostAddresses()
		if err != nil {
			problems = append(problems, err.Error())
		}
		list = append(list, host...)
		gw, err := defaultGateways()
		if err != nil {
			problems = append(problems, err.Error())
		}
		list = append(list, gw...)
		return nil
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	if g.lapi != "" {
		addrs, err := resolve(g.lapi)
		if err != nil {
			problems = append(problems, err.Error())
		}
		for _, a := range addrs {
			list = append(list, guard{netip.PrefixFrom(a, a.BitLen()), "the CrowdSec LAPI " + a.String()})
		}
	}
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

// hostAddresses are the addresses of every interface of the namespace.
func hostAddresses() ([]guard, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var out []guard
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		out = append(out, guard{netip.PrefixFrom(ip, ip.BitLen()), "the host's address " + ip.String()})
	}
	return out, nil
}

// defaultGateways are the next hops of the default routes, both families.
func defaultGateways() ([]guard, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list the routes: %w", err)
	}
	var out []guard
	add := func(gw net.IP) {
		if ip, ok := netip.AddrFromSlice(gw); ok && ip.IsValid() {
			ip = ip.Unmap()
			out = append(out, guard{netip.PrefixFrom(ip, ip.BitLen()), "the default gateway " + ip.String()})
		}
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		add(r.Gw)
		for _, nh := range r.MultiPath {
			add(nh.Gw)
		}
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

func mergeGuards(a, b []guard) []guard {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}

// describeGuards lists the guards for the log; a long allow list is
// counted, not listed.
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
	for _, x := range list {
		parts = append(parts, x.what)
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// inNamespace runs f on a thread inside network namespace ns (a name of
// ip netns's or a path), or directly without one or when the process is
// in it already.
func inNamespace(ns string, f func() error) error {
	if ns == "" {
		return f()
	}
	path := ns
	if !strings.Contains(ns, "/") {
		path = "/var/run/netns/" + ns
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", quote.Value(ns), err)
	}
	defer target.Close()
	var there, own unix.Stat_t
	if unix.Stat(path, &there) == nil && unix.Stat("/proc/self/ns/net", &own) == nil && there.Dev == own.Dev && there.Ino == own.Ino {
		return f()
	}
	return nsthread.Do(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter namespace %s: %w", quote.Value(ns), err)
		}
		return nil
	}, f)
}
