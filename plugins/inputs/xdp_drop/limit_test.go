package xdp_drop

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// TestInitLimitRules: limit rules become the budgets they say, with the
// defaults (burst = rate, per source, /32 and /64) where left out.
func TestInitLimitRules(t *testing.T) {
	udp, icmp := []any{"udp"}, []any{"icmp", "ipv6-icmp"}
	p := withRules(nil,
		Rule{Name: "dns-per-source", Action: "limit", Protocol: udp, DstPort: []any{int64(53)}, Rate: int64(1000), Burst: int64(2000), Per: "source"},
		Rule{Name: "ntp", Action: "limit", Protocol: udp, SrcPort: []any{int64(123)}, Rate: int64(50), LimitPrefixIPv4: int64(24), LimitPrefixIPv6: int64(48)},
		Rule{Name: "icmp-ceiling", Action: "limit", Protocol: icmp, Rate: int64(10000), Per: "rule"},
	)
	require.NoError(t, p.Init())
	require.Equal(t, []*bpf.Limit{
		{Rate: 1000, Burst: 2000, PrefixV4: 32, PrefixV6: 64},
		{Rate: 50, Burst: 50, PrefixV4: 24, PrefixV6: 48},
		{Rate: 10000, Burst: 10000, PerRule: true, PrefixV4: 32, PrefixV6: 64},
	}, []*bpf.Limit{p.links.policy.Rules[0].Limit, p.links.policy.Rules[1].Limit, p.links.policy.Rules[2].Limit})
	for _, r := range p.links.policy.Rules {
		require.False(t, r.Drop, r.Name)
	}
}

// TestInitLimitErrors: every bad budget is refused naming the rule, the
// key and the value, and what to write instead.
func TestInitLimitErrors(t *testing.T) {
	udp := []any{"udp"}
	limit := func(r Rule) Rule {
		r.Name, r.Action, r.Protocol = "dns", "limit", udp
		return r
	}
	cases := []struct {
		name string
		rule Rule
		want []string
	}{
		{"no rate", limit(Rule{}), []string{`rule "dns"`, "needs rate", "rate = 1000"}},
		{"zero rate", limit(Rule{Rate: int64(0)}), []string{`rule "dns"`, "rate = 0 is out of range", "1-1000000000"}},
		{"negative burst", limit(Rule{Rate: int64(10), Burst: int64(-1)}), []string{`rule "dns"`, "burst = -1 is out of range"}},
		{"zero burst", limit(Rule{Rate: int64(10), Burst: int64(0)}), []string{`rule "dns"`, "burst = 0 is out of range"}},
		{"huge rate", limit(Rule{Rate: int64(2_000_000_000)}), []string{"rate = 2000000000 is out of range"}},
		{"rate as text", limit(Rule{Rate: "1000"}), []string{`rate = "1000" (string) is not a whole number`}},
		{"rate as float", limit(Rule{Rate: 1.5}), []string{`rate = "1.5" (float64) is not a whole number`}},
		{"unknown per", limit(Rule{Rate: int64(10), Per: "flow"}), []string{`per = "flow" is not known`, `"source"`, `"rule"`}},
		{"ipv4 prefix", limit(Rule{Rate: int64(10), LimitPrefixIPv4: int64(33)}), []string{"limit_prefix_ipv4 = 33 is out of range", "0-32"}},
		{"ipv6 prefix", limit(Rule{Rate: int64(10), LimitPrefixIPv6: int64(129)}), []string{"limit_prefix_ipv6 = 129 is out of range", "0-128"}},
		{"prefix per rule", limit(Rule{Rate: int64(10), Per: "rule", LimitPrefixIPv4: int64(24)}), []string{"limit_prefix_ipv4", `per = "rule"`, "leave limit_prefix_ipv4 out"}},
		{"rate on drop", Rule{Name: "dns", Action: "drop", Protocol: udp, Rate: int64(10)}, []string{`rule "dns"`, `rate is a limit's; it needs action = "limit"`, `"drop"`}},
		{"burst on pass", Rule{Name: "dns", Action: "pass", Protocol: udp, Burst: int64(10)}, []string{`burst is a limit's`}},
		{"per on drop", Rule{Name: "dns", Action: "drop", Protocol: udp, Per: "rule"}, []string{`per is a limit's`}},
		{"prefix on pass", Rule{Name: "dns", Action: "pass", Protocol: udp, LimitPrefixIPv6: int64(64)}, []string{`limit_prefix_ipv6 is a limit's`}},
		{"no condition", Rule{Name: "dns", Action: "limit", Rate: int64(10)}, []string{`rule "dns"`, "has no condition"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := withRules(nil, c.rule).Init()
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}
