package xdp_drop

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Rule is one [[inputs.xdp_drop.rule]]: the frames it matches get its
// action, before the drop list. Every field given must match; within a
// field any listed value matches.
type Rule struct {
	Name      string   `toml:"name"`
	Action    string   `toml:"action"`
	Protocol  []any    `toml:"protocol"`
	SrcPrefix []string `toml:"src_prefix"`
	DstPrefix []string `toml:"dst_prefix"`
	// SrcPrefixFile and DstPrefixFile name files of prefixes, one a line,
	// that the rule matches as well; a change to them is put in force live.
	SrcPrefixFile []string `toml:"src_prefix_file"`
	DstPrefixFile []string `toml:"dst_prefix_file"`
	SrcPort       []any    `toml:"src_port"`
	DstPort       []any    `toml:"dst_port"`
	// The budget of action = "limit" (see limit.go).
	Rate            any    `toml:"rate"`
	Burst           any    `toml:"burst"`
	Per             string `toml:"per"`
	LimitPrefixIPv4 any    `toml:"limit_prefix_ipv4"`
	LimitPrefixIPv6 any    `toml:"limit_prefix_ipv6"`
}

const maxRuleName = 64

// maxPortEntries bounds the entries of src_port and of dst_port in a rule:
// longer lists are ranges written out port by port.
const maxPortEntries = 1024

// parseRules turns the rules into the policy's, checking each. Unless
// there are too many, it returns every rule, those refused too (their
// fields as far as they read), and joins every refusal: of each rule, each
// field.
func parseRules(rules []Rule) ([]bpf.Rule, error) {
	if len(rules) > bpf.MaxRules {
		return nil, optionError("rule", fmt.Errorf("rule: %d rules; at most %d fit one [[inputs.xdp_drop]] (the program matches them with 64-bit masks)", len(rules), bpf.MaxRules))
	}
	out := make([]bpf.Rule, 0, len(rules))
	names := make(map[string]int, len(rules))
	var errs []error
	var v4, v6 int
	for i := range rules {
		r, err := parseRule(&rules[i], i+1)
		errs = append(errs, Errors(err)...)
		if first, ok := names[r.Name]; ok && r.Name != "" {
			errs = append(errs, &OptionError{Rule: i + 1, Key: "name",
				Err: fmt.Errorf("rule %s: name is used by rule %d already; names must be unique", quote.Value(r.Name), first)})
		} else if !ok {
			names[r.Name] = i + 1
		}
		n4, n6 := familyCounts(r.SrcPrefixes, r.DstPrefixes)
		v4, v6 = v4+n4, v6+n6
		out = append(out, r)
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"IPv4", v4}, {"IPv6", v6}} {
		if f.n > bpf.MaxPrefixes {
			errs = append(errs, optionError("rule", fmt.Errorf("rule: the rules list %d %s prefixes (src_prefix and dst_prefix together); at most %d per family fit", f.n, f.name, bpf.MaxPrefixes)))
		}
	}
	return out, errors.Join(errs...)
}

// parseRule checks one rule; n is its position, for a rule without a name.
// Fields are checked apart, and the error joins every field refused;
// checks across fields are made when the fields they look at read.
func parseRule(r *Rule, n int) (bpf.Rule, error) {
	var out bpf.Rule
	label := "rule " + quote.Value(r.Name)
	var errs []error
	if err := checkRuleName(r.Name, n); err != nil {
		errs = append(errs, &OptionError{Rule: n, Key: "name", Err: err})
		label = fmt.Sprintf("rule %d", n)
	} else {
		out.Name = r.Name
	}
	fail := func(key string, err error) bool {
		if err != nil {
			errs = append(errs, inRule(n, label, key, err))
		}
		return err != nil
	}
	switch r.Action {
	case "drop":
		out.Drop = true
	case "pass", "limit":
	case "":
		fail("action", errors.New(`action is missing; use action = "drop", "pass" or "limit"`))
	default:
		fail("action", fmt.Errorf(`action = %s is not an action; use "drop", "pass" or "limit"`, quote.Value(r.Action)))
	}
	fail("", parseLimit(r, &out))
	if field := emptyCondition(r); field != "" {
		fail(field, fmt.Errorf("%s = [] lists no value; leave %s out to match any value, or list the values to match", field, field))
	}
	var err error
	out.Protocols, err = parseRuleProtocols(r.Protocol)
	badProtocols := fail("protocol", wrap("protocol", err))
	out.SrcPrefixes, err = parsePrefixes(r.SrcPrefix)
	badPrefixes := fail("src_prefix", wrap("src_prefix", err))
	out.DstPrefixes, err = parsePrefixes(r.DstPrefix)
	badPrefixes = fail("dst_prefix", wrap("dst_prefix", err)) || badPrefixes
	fail("", parseRuleFiles(r, &out))
	out.SrcPorts, err = parsePorts(r.SrcPort)
	badPorts := fail("src_port", wrap("src_port", err))
	out.DstPorts, err = parsePorts(r.DstPort)
	badPorts = fail("dst_port", wrap("dst_port", err)) || badPorts
	if len(r.Protocol)+len(r.SrcPrefix)+len(r.DstPrefix)+len(r.SrcPrefixFile)+len(r.DstPrefixFile)+len(r.SrcPort)+len(r.DstPort) == 0 {
		fail("", errors.New(`has no condition; give at least one of protocol, src_prefix, dst_prefix, src_prefix_file, dst_prefix_file, src_port, dst_port (for every frame use drop = ["all"])`))
	}
	// The families of prefix files change with them: not checked.
	if err := checkPrefixFamilies(&out); !badPrefixes && len(out.PrefixFiles) == 0 && err != nil {
		fail("", err)
	}
	if !badProtocols && !badPorts {
		fail("", checkPortProtocols(&out, r))
	}
	return out, errors.Join(errs...)
}

// wrap prefixes err with the key it refuses; nil stays nil.
func wrap(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", key, err)
}

// emptyCondition names a condition given as an empty list, which would
// otherwise match as if it were left out: any value. A field left out
// decodes as nil, [] as an empty slice.
func emptyCondition(r *Rule) string {
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && !f.IsNil() && f.Len() == 0 {
			key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ",")
			return key
		}
	}
	return ""
}

func checkRuleName(name string, n int) error {
	const rule = "use [a-z0-9_.-], at most 64 characters"
	switch {
	case name == "":
		return fmt.Errorf("rule %d: name is missing; every rule needs a unique name (%s): it is the rule tag of xdp_drop_rule", n, rule)
	case len(name) > maxRuleName:
		return fmt.Errorf("rule %d: name %s is %d characters long; %s", n, quote.Value(name), len(name), rule)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("rule %d: name %s holds %s; %s", n, quote.Value(name), quote.Rune(c), rule)
		}
	}
	return nil
}

// parseRuleProtocols reads protocol names or numbers, as in drop.
func parseRuleProtocols(list []any) ([]uint8, error) {
	var out []uint8
	for _, item := range list {
		var proto uint8
		switch v := item.(type) {
		case string:
			n, ok := lookupProtocol(v)
			if !ok {
				return nil, fmt.Errorf("%s is not an IP protocol name; use names or numbers 0-255 such as \"udp\" or 47%s", quote.Value(v), suggest(v))
			}
			proto = n
		case int64:
			if v < 0 || v > 255 {
				return nil, fmt.Errorf("%d is out of range; IP protocol numbers are 0-255", v)
			}
			proto = uint8(v)
		default:
			return nil, fmt.Errorf("%s (%T) is neither a protocol name nor a number", quote.Value(fmt.Sprint(item)), item)
		}
		if slices.Contains(out, proto) {
			return nil, fmt.Errorf("%s (%d) is listed twice", protocolTag(proto), proto)
		}
		out = append(out, proto)
	}
	return out, nil
}

// checkPrefixFamilies refuses a rule whose source and destination prefixes
// have no family in common: both addresses of a frame are of one family, so
// it could never match.
func checkPrefixFamilies(out *bpf.Rule) error {
	src4, src6 := familyCounts(out.SrcPrefixes)
	dst4, dst6 := familyCounts(out.DstPrefixes)
	if len(out.SrcPrefixes) == 0 || len(out.DstPrefixes) == 0 || src4 > 0 && dst4 > 0 || src6 > 0 && dst6 > 0 {
		return nil
	}
	srcFamily, dstFamily := "IPv4", "IPv6"
	if src6 > 0 {
		srcFamily, dstFamily = dstFamily, srcFamily
	}
	return fmt.Errorf("src_prefix holds only %s prefixes and dst_prefix only %s ones, so no frame can match (its source and destination are of one family); "+
		"list prefixes of the same family in both fields, or, to match either field alone, write two rules", srcFamily, dstFamily)
}

// parsePorts reads port numbers and "lo-hi" ranges. Repeated and
// overlapping entries are allowed: they match as one.
func parsePorts(list []any) ([]bpf.PortRange, error) {
	if len(list) > maxPortEntries {
		return nil, fmt.Errorf(`%d entries; at most %d fit one field: write consecutive ports as a range such as "1000-1999"`, len(list), maxPortEntries)
	}
	var out []bpf.PortRange
	for _, item := range list {
		var r bpf.PortRange
		switch v := item.(type) {
		case int64:
			p, err := portNumber(v)
			if err != nil {
				return nil, err
			}
			r = bpf.PortRange{Lo: p, Hi: p}
		case string:
			var err error
			if r, err = parsePortRange(v); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s (%T) is neither a port number nor a range such as \"1000-1999\"", quote.Value(fmt.Sprint(item)), item)
		}
		out = append(out, r)
	}
	return out, nil
}

func portNumber(v int64) (uint16, error) {
	if v < 0 || v > 65535 {
		return 0, fmt.Errorf("%d is out of range; ports are 0-65535", v)
	}
	return uint16(v), nil
}

// parsePortRange reads "80" or "1000-1999" written in decimal digits alone:
// "+80", " 81 " and "082" (a leading zero reads as octal elsewhere) are
// refused with the spelling to use, as they may not say what was meant.
func parsePortRange(s string) (bpf.PortRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	l, lok := portDigits(lo)
	h, hok := portDigits(hi)
	switch {
	case !lok || !hok:
		return bpf.PortRange{}, badPort(s)
	case l > 65535 || h > 65535:
		return bpf.PortRange{}, fmt.Errorf("%s is out of range; ports are 0-65535", quote.Value(s))
	case l > h:
		return bpf.PortRange{}, fmt.Errorf("%s is reversed; write \"%d-%d\"", quote.Value(s), h, l)
	}
	return bpf.PortRange{Lo: uint16(l), Hi: uint16(h)}, nil
}

// portDigits reads a port in decimal digits without a leading zero; ok is
// false for anything else. A number too long to be a port reads as more
// than 65535.
func portDigits(t string) (n int, ok bool) {
	if t == "" || t[0] == '0' && len(t) > 1 {
		return 0, false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, false
		}
		if n <= 65535 {
			n = n*10 + int(t[i]-'0')
		}
	}
	return n, true
}

// badPort refuses a port string, with the spelling to use when it reads as
// a port once signs, spaces and leading zeros are dropped.
func badPort(s string) error {
	lo, hi, isRange := strings.Cut(s, "-")
	l, lerr := strconv.ParseUint(strings.TrimLeft(strings.TrimSpace(lo), "+"), 10, 16)
	h, herr := strconv.ParseUint(strings.TrimLeft(strings.TrimSpace(hi), "+"), 10, 16)
	switch {
	case lerr == nil && !isRange:
		return fmt.Errorf("%s: write the port as %d (digits only: no sign, spaces or leading zeros)", quote.Value(s), l)
	case lerr == nil && herr == nil && l <= h:
		return fmt.Errorf("%s: write the range as \"%d-%d\" (digits only: no sign, spaces or leading zeros)", quote.Value(s), l, h)
	}
	return fmt.Errorf("%s is neither a port number nor a range such as \"1000-1999\"", quote.Value(s))
}

// checkPortProtocols: ports need a protocol limited to those that carry them.
func checkPortProtocols(out *bpf.Rule, r *Rule) error {
	if len(out.SrcPorts)+len(out.DstPorts) == 0 {
		return nil
	}
	field := "src_port"
	if len(out.SrcPorts) == 0 {
		field = "dst_port"
	}
	const limit = `limit protocol to tcp, udp, sctp or udplite, e.g. protocol = ["udp"]`
	if len(out.Protocols) == 0 {
		return fmt.Errorf("%s needs a protocol that carries ports; %s", field, limit)
	}
	for _, p := range out.Protocols {
		if !slices.Contains(bpf.PortProtocols, p) {
			return fmt.Errorf("%s: protocol %s carries no ports; %s", field, protocolTag(p), limit)
		}
	}
	return nil
}
