package xdp_drop

import "github.com/xdp-drop/xdp_drop/bpf"

// standingSet holds, per class, a bit per action (1 << bpf.Action): the
// series emitted at every gather from attach, also at zero.
type standingSet [bpf.ClassCount]uint8

var noStanding standingSet

// commonProtocols are the IP protocols whose classes stand in both
// families, apart from those the policy names.
var commonProtocols = []uint8{6, 17} // tcp, udp

// standingClasses is the standing set of a policy: Prometheus keeps only
// each scrape's latest value, so a series it first sees after a burst has
// lost that burst to increase() and to the sum of differences; a series
// that stands at zero from attach has not. It holds, in the default view,
// under every action the policy can give them:
//   - in IPv4 and IPv6, tcp, udp, and every protocol the drop list or a
//     rule names (all of them in both families, as the policy applies);
//   - icmp in IPv4, ipv6-icmp in IPv6;
//   - truncated in each family, and arp and other in l2.
//
// The actions: the one the drop list gives the class and, for whole IP
// frames, that of every rule that can match the protocol (both for a limit
// rule).
func standingClasses(p bpf.Policy) standingSet {
	var s standingSet
	own := func(c bpf.Class) {
		s[c] |= 1 << ownAction(p, c)
	}
	ip := func(c bpf.Class, proto uint8) {
		own(c)
		for _, r := range p.Rules {
			if len(r.Protocols) > 0 && !containsProto(r.Protocols, proto) {
				continue
			}
			switch {
			case r.Limit != nil:
				s[c] |= 1<<bpf.ActionPass | 1<<bpf.ActionDrop
			case r.Drop:
				s[c] |= 1 << bpf.ActionDrop
			default:
				s[c] |= 1 << bpf.ActionPass
			}
		}
	}
	named := append([]uint8(nil), commonProtocols...)
	named = append(named, p.Protocols...)
	for _, r := range p.Rules {
		named = append(named, r.Protocols...)
	}
	for _, proto := range named {
		ip(bpf.IPv4Class(proto), proto)
		ip(bpf.IPv6Class(proto), proto)
	}
	ip(bpf.IPv4Class(1), 1)   // icmp
	ip(bpf.IPv6Class(58), 58) // ipv6-icmp
	for _, c := range []bpf.Class{bpf.ClassIPv4Truncated, bpf.ClassIPv6Truncated, bpf.ClassL2Truncated, bpf.ClassL2ARP, bpf.ClassL2Other} {
		own(c)
	}
	return s
}

// ownAction is the action the drop list gives frames of class c.
func ownAction(p bpf.Policy, c bpf.Class) bpf.Action {
	if p.Drops(c) {
		return bpf.ActionDrop
	}
	return bpf.ActionPass
}

func containsProto(list []uint8, proto uint8) bool {
	for _, p := range list {
		if p == proto {
			return true
		}
	}
	return false
}
