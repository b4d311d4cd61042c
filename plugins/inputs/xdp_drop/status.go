package xdp_drop

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// RuleInForce is one rule as the policy in force holds it: what -status
// shows beside the rule's counters.
type RuleInForce struct {
	Name   string
	Action string // drop, pass or limit, as configured
	// Protocols are the protocol tags it matches; none matches any.
	Protocols          []string
	SrcPorts, DstPorts []string // "53" or "1024-65535"; none matches any
	// Src and Dst are the prefixes in force of each direction by family,
	// options and files merged, repeats counted once.
	Src, Dst FamilyCount
	Sources  []PrefixSource // where they come from, by option
	Limit    *bpf.Limit     // for action = "limit"
}

// PrefixSource is one source of a rule's prefixes: an option of the
// config, or one file of a prefix file option, as read by this process.
type PrefixSource struct {
	Option     string // src_prefix, dst_prefix, src_prefix_file, dst_prefix_file
	File       string // for the file options
	IPv4, IPv6 int    // the prefixes it lists, repeats counted once
	Error      string // why the file does not read ("" when it does)
}

// RulesInForce lists the rules in config order, as compiled: the policy
// the program is loaded from, and the prefix files as last read.
func (x *XDPDrop) RulesInForce() []RuleInForce {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]RuleInForce, 0, len(x.links.policy.Rules))
	for i := range x.links.policy.Rules {
		br := &x.links.policy.Rules[i]
		r := RuleInForce{Name: br.Name, Action: x.Rules[i].Action, Limit: br.Limit}
		for _, p := range br.Protocols {
			r.Protocols = append(r.Protocols, protocolTag(p))
		}
		r.SrcPorts, r.DstPorts = portTexts(br.SrcPorts), portTexts(br.DstPorts)
		r.Src.IPv4, r.Src.IPv6 = familyCounts(br.SrcPrefixes)
		r.Dst.IPv4, r.Dst.IPv6 = familyCounts(br.DstPrefixes)
		src, dst := br.SrcPrefixes, br.DstPrefixes
		var fr *fileRule
		if i < len(x.files.rules) {
			fr = x.files.rules[i]
		}
		if fr != nil {
			src, dst = fr.src, fr.dst // the options' own, before the files
		}
		for _, o := range []struct {
			option string
			ps     []netip.Prefix
		}{{"src_prefix", src}, {"dst_prefix", dst}} {
			if len(o.ps) > 0 {
				v4, v6 := familyCounts(o.ps)
				r.Sources = append(r.Sources, PrefixSource{Option: o.option, IPv4: v4, IPv6: v6})
			}
		}
		if fr != nil {
			for _, pf := range fr.files {
				v4, v6 := familyCounts(uniquePrefixes(slices.Clone(pf.prefixes)))
				s := PrefixSource{Option: pf.key, File: pf.path, IPv4: v4, IPv6: v6}
				if pf.err != nil {
					s.Error = quote.Line(pf.err.Error())
				}
				r.Sources = append(r.Sources, s)
			}
		}
		out = append(out, r)
	}
	return out
}

// portTexts writes port ranges as the config does: "53", "1024-65535".
func portTexts(rs []bpf.PortRange) []string {
	var out []string
	for _, r := range rs {
		s := strconv.Itoa(int(r.Lo))
		if r.Hi != r.Lo {
			s += "-" + strconv.Itoa(int(r.Hi))
		}
		out = append(out, s)
	}
	return out
}
