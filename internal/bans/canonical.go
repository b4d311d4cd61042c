package bans

import (
	"fmt"
	"net/netip"
)

// mapped4in6 is ::ffff:0:0/96, the IPv4-mapped IPv6 addresses: the one
// 4-in-6 form the ban table unmaps (it keeps a prefix of length 96 or
// more inside it as the IPv4 prefix of length − 96). IPv4-compatible
// (::/96) and NAT64 (64:ff9b::/96) prefixes stay IPv6, and the kernel's
// lookup of an IPv6 frame's source unmaps nothing.
var mapped4in6 = netip.MustParsePrefix("::ffff:0:0/96")

// Canonical is p as the ban table enforces it: masked, and an
// IPv4-mapped IPv6 prefix of length 96 or more as its IPv4 prefix. A
// non-empty reason says why no ban of p can be made: an IPv6 prefix
// shorter than /96 that holds the mapped block (a ban of it would not
// hold what its IPv4 sources send), or one that unmaps to every IPv4
// address. p is then returned masked, not unmapped.
func Canonical(p netip.Prefix) (netip.Prefix, string) {
	if !p.IsValid() {
		return p, fmt.Sprintf("%s is not a valid prefix", p)
	}
	p = p.Masked()
	a := p.Addr()
	switch {
	case a.Is4In6() && p.Bits() == 96:
		return p, fmt.Sprintf("%s is every IPv4-mapped address: it would be a ban of all of IPv4", p)
	case a.Is4In6() && p.Bits() > 96:
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96), ""
	case a.Is6() && p.Overlaps(mapped4in6):
		return p, fmt.Sprintf("%s holds the IPv4-mapped addresses ::ffff:0:0/96 (IPv4 sources in IPv6 form); set top_source_prefix_ipv6 to 97 or more to ban them as IPv4", p)
	}
	return p, ""
}

// canonicalGuard is p canonical, or p itself when no ban of it can be
// made (it still guards what it overlaps in its own family).
func canonicalGuard(p netip.Prefix) netip.Prefix {
	if c, why := Canonical(p); why == "" {
		return c
	}
	return p.Masked()
}
