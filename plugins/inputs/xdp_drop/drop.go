package xdp_drop

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// parsePolicy turns the drop option and the rules into a policy. With
// rules or bans, drop is optional: frames no rule or ban decides then
// pass. The policy holds every rule, those refused too, unless there are
// too many; the error joins every refusal.
func parsePolicy(drop []any, rules []Rule, bans bool) (bpf.Policy, error) {
	var p bpf.Policy
	var dropErr error
	if len(drop) > 0 || len(rules) == 0 && !bans {
		p, dropErr = ParseDrop(drop)
		dropErr = optionError("drop", dropErr)
	}
	var rulesErr error
	p.Rules, rulesErr = parseRules(rules)
	if len(p.Rules) == 0 {
		p.Rules = nil
	}
	return p, errors.Join(dropErr, rulesErr)
}

// ParseDrop turns the drop option into a policy: ["all"], or IP protocol
// names (keywords and aliases, any case) and numbers, as TOML decodes them
// (string, int64).
func ParseDrop(drop []any) (bpf.Policy, error) {
	const accepted = `use ["all"], or IP protocol names or numbers 0-255 such as ["udp", "icmp", 47]`
	if len(drop) == 0 {
		return bpf.Policy{}, fmt.Errorf("drop is empty; %s (dry_run = true counts without dropping), or give rules or [inputs.xdp_drop.bans]", accepted)
	}
	var p bpf.Policy
	seen := make(map[uint8]bool)
	for _, item := range drop {
		var proto uint8
		switch v := item.(type) {
		case string:
			if strings.EqualFold(v, "all") {
				if len(drop) != 1 {
					return bpf.Policy{}, errors.New(`drop: "all" must stand alone; use ["all"], or list protocols without it`)
				}
				return bpf.Policy{DropAll: true}, nil
			}
			n, ok := lookupProtocol(v)
			if !ok {
				return bpf.Policy{}, fmt.Errorf("drop: %s is not an IP protocol name; %s%s", quote.Value(v), accepted, suggest(v))
			}
			proto = n
		case int64:
			if v < 0 || v > 255 {
				return bpf.Policy{}, fmt.Errorf("drop: %d is out of range; IP protocol numbers are 0-255", v)
			}
			proto = uint8(v)
		default:
			return bpf.Policy{}, fmt.Errorf("drop: %s (%T) is neither a protocol name nor a number; %s", quote.Value(fmt.Sprint(item)), item, accepted)
		}
		if seen[proto] {
			return bpf.Policy{}, fmt.Errorf("drop: protocol %s (%d) is listed twice", protocolTag(proto), proto)
		}
		seen[proto] = true
		p.Protocols = append(p.Protocols, proto)
	}
	return p, nil
}

// suggest names a keyword close to a mistyped protocol name.
func suggest(name string) string {
	l := strings.ToLower(name)
	for _, k := range []string{"icmp", "udp", "tcp", "sctp", "gre", "esp"} {
		if strings.Contains(l, k) && l != k {
			if k == "icmp" && strings.Contains(l, "6") {
				return `; did you mean "ipv6-icmp"?`
			}
			return fmt.Sprintf("; did you mean %s?", quote.Value(k))
		}
	}
	if _, err := strconv.Atoi(name); err == nil {
		return "; numbers are 0-255"
	}
	return ""
}
