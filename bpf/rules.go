package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// MaxRules is the number of rules a policy may have.
const MaxRules = int(xdpDropRuleLimitsRULE_MAX)

// MaxPrefixes is the number of address prefixes a policy's rules may list
// per family, source and destination together.
const MaxPrefixes = 100_000

// PortRange is an inclusive range of TCP, UDP, SCTP or UDP-Lite ports.
type PortRange struct {
	Lo, Hi uint16
}

// Contains reports whether port is in the range.
func (r PortRange) Contains(port uint16) bool { return r.Lo <= port && port <= r.Hi }

// PortProtocols are the IP protocols whose headers begin with the source and
// destination ports: the only ones a rule with ports may name.
var PortProtocols = []uint8{6, 17, 132, 136}

// Rule decides the frames it matches: IP frames whose headers are whole and
// that satisfy every condition given. Within a condition any listed value
// matches; an empty condition is not checked.
type Rule struct {
	Name string
	// Drop is the rule's action: drop (or in a dry run count as
	// would_drop) when set, pass otherwise.
	Drop bool
	// Protocols are IP protocols. A rule with ports must list only
	// PortProtocols.
	Protocols []uint8
	// SrcPrefixes and DstPrefixes are masked address prefixes of either
	// family; a rule whose prefixes of a direction are all of one family
	// never matches frames of the other.
	SrcPrefixes, DstPrefixes []netip.Prefix
	// SrcPorts and DstPorts never match a later fragment, which carries no
	// ports.
	SrcPorts, DstPorts []PortRange
	// Limit, when set, makes the rule a limit rule (Drop unset): it passes
	// the frames it matches within their budget and drops the others.
	Limit *Limit
	// PrefixFiles names the files some of the prefixes come from, which
	// change while the program runs (see Program.SwapRules): the counters'
	// fingerprint names the files instead of the rule's prefixes, so that
	// counters continue across their changes.
	PrefixFiles []string
}

func (r *Rule) hasPorts() bool { return len(r.SrcPorts) > 0 || len(r.DstPorts) > 0 }

// check reports what makes a rule unloadable; the plugin's validation
// names the option, this is the last line of defence.
func (r *Rule) check() error {
	if len(r.Protocols)+len(r.SrcPrefixes)+len(r.DstPrefixes)+len(r.SrcPorts)+len(r.DstPorts) == 0 {
		return errors.New("has no condition")
	}
	if r.hasPorts() {
		if len(r.Protocols) == 0 {
			return errors.New("has ports but no protocol limited to tcp, udp, sctp or udplite")
		}
		for _, p := range r.Protocols {
			if !slices.Contains(PortProtocols, p) {
				return fmt.Errorf("has ports but protocol %d carries none", p)
			}
		}
	}
	for _, pr := range append(slices.Clone(r.SrcPorts), r.DstPorts...) {
		if pr.Lo > pr.Hi {
			return fmt.Errorf("port range %d-%d is reversed", pr.Lo, pr.Hi)
		}
	}
	for _, p := range append(slices.Clone(r.SrcPrefixes), r.DstPrefixes...) {
		if !p.IsValid() || p != p.Masked() {
			return fmt.Errorf("prefix %s is not a masked prefix", p)
		}
	}
	if r.Limit != nil {
		return r.checkLimit()
	}
	return nil
}

// ruleTables is a policy's rules compiled for the program: the constants
// and the contents of the prefix and port maps.
type ruleTables struct {
	count                  uint32
	dims                   uint8
	proto                  [256]uint64
	noSrc, noDst           uint64
	ports                  uint64
	src, dst               prefixTables
	exact                  exactTable // both directions' exact prefixes
	srcPort, dstPort       []uint64   // by port; nil without port rules
	prefixesV4, prefixesV6 int
}

// compileRules builds the tables of rules: bit i of every mask is rule i.
// The exact prefixes are laid out under a fresh secret key.
func compileRules(rules []Rule) (*ruleTables, error) {
	return compileRulesUnder(rules, newHashKey())
}

// compileRulesUnder is compileRules with the exact prefixes laid out under
// key: the same rules under the same key give the same tables, as those of
// rule maps handed over (Instance.AdoptRules).
func compileRulesUnder(rules []Rule, key hashKey) (*ruleTables, error) {
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("%d rules: at most %d are possible", len(rules), MaxRules)
	}
	t := &ruleTables{count: uint32(len(rules))}
	var src, dst prefixSet
	for i := range rules {
		r := &rules[i]
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("rule %s %w", quote.Value(r.Name), err)
		}
		bit := uint64(1) << i
		if len(r.Protocols) == 0 {
			for p := range t.proto {
				t.proto[p] |= bit
			}
		}
		for _, p := range r.Protocols {
			t.proto[p] |= bit
		}
		if len(r.SrcPrefixes) == 0 {
			t.noSrc |= bit
		}
		if len(r.DstPrefixes) == 0 {
			t.noDst |= bit
		}
		src.add(r.SrcPrefixes, bit)
		dst.add(r.DstPrefixes, bit)
		if r.hasPorts() {
			t.ports |= bit
		}
		if r.Limit != nil {
			t.dims |= ruleDimLimits
		}
	}
	t.prefixesV4, t.prefixesV6 = src.v4+dst.v4, src.v6+dst.v6
	for _, f := range []struct {
		name string
		n    int
	}{{"IPv4", t.prefixesV4}, {"IPv6", t.prefixesV6}} {
		if f.n > MaxPrefixes {
			return nil, fmt.Errorf("rules list %d %s prefixes: at most %d are possible", f.n, f.name, MaxPrefixes)
		}
	}
	if len(src.direct) > 0 {
		t.dims |= uint8(xdpDropRuleDimsRULE_DIM_SRC)
	}
	if len(dst.direct) > 0 {
		t.dims |= uint8(xdpDropRuleDimsRULE_DIM_DST)
	}
	t.src = buildPrefixTables(src.closure(t.noSrc), t.noSrc)
	t.dst = buildPrefixTables(dst.closure(t.noDst), t.noDst)
	t.exact = placeExact(&t.src, &t.dst, key)
	if t.ports != 0 {
		t.dims |= uint8(xdpDropRuleDimsRULE_DIM_PORTS)
		for i := range rules {
			if len(rules[i].SrcPorts) > 0 {
				t.dims |= uint8(xdpDropRuleDimsRULE_DIM_SPORT)
			}
			if len(rules[i].DstPorts) > 0 {
				t.dims |= uint8(xdpDropRuleDimsRULE_DIM_DPORT)
			}
		}
		t.srcPort = portMasks(rules, func(r *Rule) []PortRange { return r.SrcPorts })
		t.dstPort = portMasks(rules, func(r *Rule) []PortRange { return r.DstPorts })
	}
	return t, nil
}

// buckets is the size of the prefix bucket table: both families of the
// source, then of the destination, when rules have them.
func (t *ruleTables) buckets() int {
	switch {
	case len(t.dst.buckets) > 0:
		return 2 * 2 * buckets
	case len(t.src.buckets) > 0:
		return 2 * buckets
	}
	return 0
}

// portMasks is the mask of every port: the rules it satisfies, which
// include every rule without ports in that direction.
func portMasks(rules []Rule, ranges func(*Rule) []PortRange) []uint64 {
	masks := make([]uint64, 1<<16)
	for i := range rules {
		bit := uint64(1) << i
		rs := ranges(&rules[i])
		if len(rs) == 0 {
			for p := range masks {
				masks[p] |= bit
			}
			continue
		}
		for _, pr := range mergePortRanges(rs) {
			for p := int(pr.Lo); p <= int(pr.Hi); p++ {
				masks[p] |= bit
			}
		}
	}
	return masks
}

// mergePortRanges joins overlapping and adjacent ranges, so that a port is
// set once per rule however often the rule's ranges cover it.
func mergePortRanges(rs []PortRange) []PortRange {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b PortRange) int { return int(a.Lo) - int(b.Lo) })
	out := sorted[:0]
	for _, r := range sorted {
		if n := len(out); n > 0 && int(r.Lo) <= int(out[n-1].Hi)+1 {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// prefixSet gathers the prefixes of one direction with the rules listing
// each.
type prefixSet struct {
	direct map[netip.Prefix]uint64
	v4, v6 int
}

func (s *prefixSet) add(ps []netip.Prefix, bit uint64) {
	if s.direct == nil && len(ps) > 0 {
		s.direct = make(map[netip.Prefix]uint64)
	}
	for _, p := range ps {
		if p.Addr().Is4() {
			s.v4++
		} else {
			s.v6++
		}
		s.direct[p] |= bit
	}
}

// closure gives every prefix the rules of every prefix containing it (a
// lookup finds only the longest) and of the rules without prefixes (miss).
// Only lengths that occur are looked at.
func (s *prefixSet) closure(miss uint64) map[netip.Prefix]uint64 {
	out := make(map[netip.Prefix]uint64, len(s.direct))
	var lens4, lens6 []int
	var seen4, seen6 [129]bool
	for p := range s.direct {
		if p.Addr().Is4() && !seen4[p.Bits()] {
			seen4[p.Bits()] = true
			lens4 = append(lens4, p.Bits())
		} else if !p.Addr().Is4() && !seen6[p.Bits()] {
			seen6[p.Bits()] = true
			lens6 = append(lens6, p.Bits())
		}
	}
	for p := range s.direct {
		lens := lens6
		if p.Addr().Is4() {
			lens = lens4
		}
		m := miss
		for _, l := range lens {
			if l > p.Bits() {
				continue
			}
			outer, _ := p.Addr().Prefix(l)
			m |= s.direct[outer]
		}
		out[p] = m
	}
	return out
}
