package xdp_drop

import (
	"fmt"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Defaults of a limit rule's source grouping: a host for IPv4, a subnet
// (what one site is usually given) for IPv6.
const (
	defaultLimitPrefixIPv4 = 32
	defaultLimitPrefixIPv6 = 64
)

// parseLimit reads the budget of an action = "limit" rule into out, and
// refuses budget keys on a rule of another action.
func parseLimit(r *Rule, out *bpf.Rule) error {
	if r.Action != "limit" {
		for _, k := range []struct {
			key   string
			given bool
		}{
			{"rate", r.Rate != nil}, {"burst", r.Burst != nil}, {"per", r.Per != ""},
			{"limit_prefix_ipv4", r.LimitPrefixIPv4 != nil}, {"limit_prefix_ipv6", r.LimitPrefixIPv6 != nil},
		} {
			if k.given {
				return fmt.Errorf(`%s is a limit's; it needs action = "limit" (this rule's action is %s): leave %s out or make the rule a limit rule`, k.key, quote.Value(r.Action), k.key)
			}
		}
		return nil
	}
	l := bpf.Limit{PrefixV4: defaultLimitPrefixIPv4, PrefixV6: defaultLimitPrefixIPv6}
	if r.Rate == nil {
		return fmt.Errorf(`action = "limit" needs rate, the frames per second it passes, e.g. rate = 1000`)
	}
	rate, err := limitNumber("rate", r.Rate, 1, bpf.MaxLimitRate, "frames per second")
	if err != nil {
		return err
	}
	l.Rate, l.Burst = rate, rate
	if r.Burst != nil {
		if l.Burst, err = limitNumber("burst", r.Burst, 1, bpf.MaxLimitBurst, "frames"); err != nil {
			return err
		}
	}
	switch r.Per {
	case "", "source":
	case "rule":
		l.PerRule = true
	default:
		return fmt.Errorf(`per = %s is not known; use per = "source" (each source its own budget) or per = "rule" (one budget for all the rule matches)`, quote.Value(r.Per))
	}
	for _, p := range []struct {
		key   string
		value any
		bits  uint64
		dst   *uint8
	}{{"limit_prefix_ipv4", r.LimitPrefixIPv4, 32, &l.PrefixV4}, {"limit_prefix_ipv6", r.LimitPrefixIPv6, 128, &l.PrefixV6}} {
		if p.value == nil {
			continue
		}
		if l.PerRule {
			return fmt.Errorf(`%s groups the sources of per = "source"; with per = "rule" all sources share one budget: leave %s out`, p.key, p.key)
		}
		n, err := limitNumber(p.key, p.value, 0, p.bits, "prefix bits")
		if err != nil {
			return err
		}
		*p.dst = uint8(n)
	}
	out.Limit = &l
	return nil
}

// limitNumber reads a whole number of a limit in lo..hi.
func limitNumber(key string, v any, lo, hi uint64, unit string) (uint64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%s = %s (%T) is not a whole number; give %s as a number of %s, %d-%d", key, quote.Value(fmt.Sprint(v)), v, key, unit, lo, hi)
	}
	if n < int64(lo) || uint64(n) > hi {
		return 0, fmt.Errorf("%s = %d is out of range; %s is %d-%d %s", key, n, key, lo, hi, unit)
	}
	return uint64(n), nil
}
