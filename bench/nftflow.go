package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// nftChain is where a FlowSpec-to-nftables translation puts its rules: a
// base chain of family (netdev or inet) on hook, for netdev on device.
type nftChain struct {
	family, table, chain, hook, device string
}

// nftRuleset translates FlowSpec rules into an nftables ruleset for nft -f,
// as FlowSpec-to-nftables translators do it: one rule per FlowSpec rule in
// enforcement order, its components in type order, each as one match
// (a numeric component as a value, a range, a comparison or an anonymous
// set of them), e.g.
//
//	ip daddr 192.0.2.10 udp sport 123 ip length >= 400 drop
//
// A rule with a port component (type 4, either port) becomes two, one per
// direction. Terminal rules end in a verdict (drop; accept, which leaves
// the chain as the engine leaves FlowSpec for the config's rules); a
// Continue rule that only counts becomes `counter`; a rate limit becomes
// `limit rate over N/second drop`, followed, when terminal, by the same
// match with accept. A rule that can match no frame is left out. What
// nftables cannot say as the engine means it (the fragment component, an
// IPv6 packet length, prefix offsets, OR of TCP-flag terms, flags above
// the eighth bit, sample) is an error naming the rule.
func nftRuleset(c nftChain, rules []bpf.FlowRule) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {\n\tchain %s {\n\t\ttype filter hook %s", c.family, c.table, c.chain, c.hook)
	if c.device != "" {
		fmt.Fprintf(&b, " device %q", c.device)
	}
	b.WriteString(" priority filter; policy accept;\n")
	for i := range rules {
		lines, err := nftRules(&rules[i])
		if err != nil {
			return "", fmt.Errorf("rule %d (%s): %w", i, rules[i].ID, err)
		}
		for _, l := range lines {
			b.WriteString("\t\t" + l + "\n")
		}
	}
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}

// Protocol numbers the translation names.
const (
	nftICMP   = 1
	nftTCP    = 6
	nftUDP    = 17
	nftICMPv6 = 58
)

// nftRules translates one FlowSpec rule: its lines, none when it can
// match no frame.
func nftRules(r *bpf.FlowRule) ([]string, error) {
	if r.Fragment != nil {
		return nil, fmt.Errorf("the fragment component: nftables has no match for first and later fragments as FlowSpec defines them")
	}
	if r.Sample {
		return nil, fmt.Errorf("the sample action: a translation has no sampler")
	}
	ip := "ip"
	if r.IPv6 {
		ip = "ip6"
	}
	var m []string // the matches every line shares
	for _, p := range []struct {
		dir string
		p   *bpf.FlowPrefix
	}{{"daddr", r.Dst}, {"saddr", r.Src}} {
		if p.p == nil || p.p.Prefix.Bits() == 0 {
			continue
		}
		if p.p.Offset != 0 {
			return nil, fmt.Errorf("a prefix offset: nftables matches prefixes from the first bit")
		}
		pfx := p.p.Prefix.Masked()
		if pfx.IsSingleIP() {
			m = append(m, fmt.Sprintf("%s %s %s", ip, p.dir, pfx.Addr()))
		} else {
			m = append(m, fmt.Sprintf("%s %s %s", ip, p.dir, pfx))
		}
	}

	// The protocols the rule can match: its protocol component and what
	// its other components need (ports: TCP or UDP; ICMP fields: ICMP of
	// the family; TCP flags: TCP).
	icmp := uint64(nftICMP)
	if r.IPv6 {
		icmp = nftICMPv6
	}
	protos := make([]bool, 256)
	for v := range protos {
		protos[v] = r.Proto == nil || r.Proto.Match(uint64(v), false)
	}
	restrict := func(allowed ...uint64) {
		for v := range protos {
			protos[v] = protos[v] && slices.Contains(allowed, uint64(v))
		}
	}
	ports := r.Port != nil || r.DstPort != nil || r.SrcPort != nil
	if ports {
		restrict(nftTCP, nftUDP)
	}
	if r.ICMPType != nil || r.ICMPCode != nil {
		restrict(icmp)
	}
	if r.TCPFlags != nil {
		restrict(nftTCP)
	}
	var set []uint64
	for v, ok := range protos {
		if ok {
			set = append(set, uint64(v))
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	// l4 names the protocol's own header where there is one protocol the
	// rule can match; the match on it carries the protocol.
	l4 := "th"
	if len(set) == 1 {
		switch set[0] {
		case nftTCP:
			l4 = "tcp"
		case nftUDP:
			l4 = "udp"
		}
	}
	protoField := "ip protocol"
	if r.IPv6 {
		protoField = "meta l4proto"
	}
	// With one protocol left, a match on its own header carries it.
	carried := len(set) == 1 && ((set[0] == nftTCP || set[0] == nftUDP) && (ports || r.TCPFlags != nil) ||
		set[0] == icmp && (r.ICMPType != nil || r.ICMPCode != nil))
	needProto := len(set) < 256 && !carried
	if needProto {
		e, ok := nftNumeric(protoField, func(v uint64) bool { return protos[v] }, 255)
		if !ok {
			return nil, nil
		}
		if e != "" {
			m = append(m, e)
		}
	}

	// Ports: the port component (either port) makes a line per direction.
	dirs := [][]string{nil}
	if r.Port != nil {
		var d [][]string
		for _, f := range []string{"sport", "dport"} {
			e, ok := nftComponent(l4+" "+f, r.Port, 0xffff)
			if ok {
				d = append(d, []string{e})
			}
		}
		if len(d) == 0 {
			return nil, nil
		}
		dirs = d
	}
	for _, c := range []struct {
		field string
		comp  bpf.FlowComponent
		max   uint64
	}{
		{l4 + " dport", r.DstPort, 0xffff},
		{l4 + " sport", r.SrcPort, 0xffff},
		{nftICMPField(r.IPv6) + " type", r.ICMPType, 0xff},
		{nftICMPField(r.IPv6) + " code", r.ICMPCode, 0xff},
	} {
		if c.comp == nil {
			continue
		}
		e, ok := nftComponent(c.field, c.comp, c.max)
		if !ok {
			return nil, nil
		}
		if e != "" {
			m = append(m, e)
		}
	}
	if r.TCPFlags != nil {
		for i, t := range r.TCPFlags {
			if i > 0 && t.Op&bpf.FlowAnd == 0 {
				return nil, fmt.Errorf("TCP flags terms ORed: an nftables rule can only AND them")
			}
			if t.Value > 0xff {
				return nil, fmt.Errorf("TCP flags %#x: nftables' tcp flags are the low eight bits", t.Value)
			}
			op, want := "!=", "0"
			if t.Op&bpf.FlowMatch != 0 {
				op, want = "==", fmt.Sprintf("%#x", t.Value)
			}
			if t.Op&bpf.FlowNot != 0 {
				op = map[string]string{"==": "!=", "!=": "=="}[op]
			}
			m = append(m, fmt.Sprintf("tcp flags & %#x %s %s", t.Value, op, want))
		}
	}
	if r.PacketLength != nil {
		if r.IPv6 {
			return nil, fmt.Errorf("an IPv6 packet length: nftables has the payload length only")
		}
		e, ok := nftComponent("ip length", r.PacketLength, 0xffff)
		if !ok {
			return nil, nil
		}
		if e != "" {
			m = append(m, e)
		}
	}
	if r.DSCP != nil {
		e, ok := nftComponent(ip+" dscp", r.DSCP, 63)
		if !ok {
			return nil, nil
		}
		if e != "" {
			m = append(m, e)
		}
	}
	if r.FlowLabel != nil {
		if !r.IPv6 {
			return nil, fmt.Errorf("a flow label in an IPv4 rule")
		}
		e, ok := nftComponent("ip6 flowlabel", r.FlowLabel, 1<<20-1)
		if !ok {
			return nil, nil
		}
		if e != "" {
			m = append(m, e)
		}
	}

	var verdicts []string
	switch r.Action {
	case bpf.FlowDrop:
		verdicts = []string{"drop"}
	case bpf.FlowAccept:
		verdicts = []string{"accept"}
		if r.Continue {
			verdicts = []string{"counter"}
		}
	case bpf.FlowLimit:
		rate := max(int64(r.Rate+0.5), 1)
		unit := "/second"
		if r.RateBytes {
			unit = " bytes/second"
		}
		verdicts = []string{fmt.Sprintf("limit rate over %d%s drop", rate, unit)}
		if !r.Continue {
			verdicts = append(verdicts, "accept")
		}
	default:
		return nil, fmt.Errorf("action %s", r.Action)
	}
	var lines []string
	for _, d := range dirs {
		match := strings.Join(append(slices.Clone(m), d...), " ")
		for _, v := range verdicts {
			lines = append(lines, strings.TrimSpace(match+" "+v))
		}
	}
	return lines, nil
}

func nftICMPField(v6 bool) string {
	if v6 {
		return "icmpv6"
	}
	return "icmp"
}

// nftComponent is the match of field for a numeric component over the
// values 0…max: "" when it matches every value; ok false when none.
func nftComponent(field string, c bpf.FlowComponent, max uint64) (string, bool) {
	return nftRanges(field, componentRanges(c, max), max)
}

// componentRanges is the set of values of 0…max that c matches, as sorted
// disjoint ranges, none adjacent to the next.
func componentRanges(c bpf.FlowComponent, max uint64) [][2]uint64 {
	// The component's value is constant between consecutive breakpoints:
	// each term's value and the one after it.
	points := []uint64{0}
	for _, t := range c {
		for _, p := range []uint64{t.Value, t.Value + 1} {
			if p <= max {
				points = append(points, p)
			}
		}
	}
	slices.Sort(points)
	points = slices.Compact(points)
	var ranges [][2]uint64
	for i, lo := range points {
		hi := max
		if i+1 < len(points) {
			hi = points[i+1] - 1
		}
		if !c.Match(lo, false) {
			continue
		}
		if n := len(ranges); n > 0 && ranges[n-1][1]+1 == lo {
			ranges[n-1][1] = hi
		} else {
			ranges = append(ranges, [2]uint64{lo, hi})
		}
	}
	return ranges
}

// nftNumeric is nftComponent for a predicate over 0…max.
func nftNumeric(field string, match func(uint64) bool, max uint64) (string, bool) {
	var ranges [][2]uint64
	for v := uint64(0); v <= max; v++ {
		if !match(v) {
			continue
		}
		if n := len(ranges); n > 0 && ranges[n-1][1]+1 == v {
			ranges[n-1][1] = v
		} else {
			ranges = append(ranges, [2]uint64{v, v})
		}
	}
	return nftRanges(field, ranges, max)
}

// nftRanges writes the match of field on ranges (sorted, disjoint, not
// adjacent) of 0…max.
func nftRanges(field string, ranges [][2]uint64, max uint64) (string, bool) {
	switch {
	case len(ranges) == 0:
		return "", false
	case len(ranges) == 1 && ranges[0] == [2]uint64{0, max}:
		return "", true
	case len(ranges) == 1:
		lo, hi := ranges[0][0], ranges[0][1]
		switch {
		case lo == hi:
			return fmt.Sprintf("%s %d", field, lo), true
		case lo == 0:
			return fmt.Sprintf("%s <= %d", field, hi), true
		case hi == max:
			return fmt.Sprintf("%s >= %d", field, lo), true
		}
	}
	items := make([]string, len(ranges))
	for i, r := range ranges {
		items[i] = strconv.FormatUint(r[0], 10)
		if r[1] != r[0] {
			items[i] += "-" + strconv.FormatUint(r[1], 10)
		}
	}
	if len(items) == 1 {
		return field + " " + items[0], true
	}
	return field + " { " + strings.Join(items, ", ") + " }", true
}
