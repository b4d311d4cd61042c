package xdp_drop

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func withRules(drop []any, rules ...Rule) *XDPDrop {
	return withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: drop, Rules: rules})
}

// TestInitRules: an example rule set (management, memcached reflection, DNS
// to the resolver) becomes the policy it says.
func TestInitRules(t *testing.T) {
	p := withRules([]any{"udp"},
		Rule{Name: "mgmt", Action: "pass", SrcPrefix: []string{"192.0.2.0/24", "2001:db8:1::/48"}},
		Rule{Name: "memcached-reflection", Action: "drop", Protocol: []any{"udp"}, SrcPort: []any{int64(11211)}},
		Rule{Name: "dns-to-resolver", Action: "pass", Protocol: []any{"udp", int64(6)}, DstPrefix: []string{"198.51.100.53"}, DstPort: []any{int64(53), "1000-1999", "5353"}},
	)
	require.NoError(t, p.Init())
	require.Equal(t, bpf.Policy{
		Protocols: []uint8{17},
		Rules: []bpf.Rule{
			{Name: "mgmt", SrcPrefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/48")}},
			{Name: "memcached-reflection", Drop: true, Protocols: []uint8{17}, SrcPorts: []bpf.PortRange{{Lo: 11211, Hi: 11211}}},
			{Name: "dns-to-resolver", Protocols: []uint8{17, 6}, DstPrefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.53/32")},
				DstPorts: []bpf.PortRange{{Lo: 53, Hi: 53}, {Lo: 1000, Hi: 1999}, {Lo: 5353, Hi: 5353}}},
		},
	}, p.links.policy)

	// With rules, drop is optional: what no rule matches passes.
	p = withRules(nil, Rule{Name: "a", Action: "drop", Protocol: []any{"gre"}})
	require.NoError(t, p.Init())
	require.Equal(t, bpf.Policy{Rules: []bpf.Rule{{Name: "a", Drop: true, Protocols: []uint8{47}}}}, p.links.policy)
}

// TestInitRuleErrors: every bad rule is refused naming the rule, the field
// and the value, and what to write instead.
func TestInitRuleErrors(t *testing.T) {
	udp := []any{"udp"}
	ok := Rule{Name: "ok", Action: "drop", Protocol: udp}
	many := func(n int) []Rule {
		rs := make([]Rule, n)
		for i := range rs {
			rs[i] = Rule{Name: fmt.Sprintf("r%d", i), Action: "drop", Protocol: []any{int64(i % 256)}}
		}
		return rs
	}
	prefixes := func(n int, v6 bool) []string {
		ps := make([]string, n)
		for i := range ps {
			if v6 {
				ps[i] = fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff)
			} else {
				ps[i] = fmt.Sprintf("10.%d.%d.0/24", i>>8&0xff, i&0xff)
				if i >= 1<<16 {
					ps[i] = fmt.Sprintf("11.%d.%d.%d/32", i>>16&0xff, i>>8&0xff, i&0xff)
				}
			}
		}
		return ps
	}
	portList := func(n int) []any {
		ps := make([]any, n)
		for i := range ps {
			ps[i] = int64(1000 + i)
		}
		return ps
	}
	cases := []struct {
		name  string
		rules []Rule
		want  []string
	}{
		{"no name", []Rule{{Action: "drop", Protocol: udp}}, []string{"rule 1", "name is missing", "[a-z0-9_.-]"}},
		{"bad name", []Rule{ok, {Name: "Mgmt Net", Action: "drop", Protocol: udp}}, []string{"rule 2", `"Mgmt Net"`, "[a-z0-9_.-]"}},
		{"long name", []Rule{{Name: strings.Repeat("a", 65), Action: "drop", Protocol: udp}}, []string{"rule 1", "65 characters", "at most 64"}},
		{"duplicate name", []Rule{ok, ok}, []string{`rule "ok"`, "rule 1", "unique"}},
		{"no action", []Rule{{Name: "x", Protocol: udp}}, []string{`rule "x"`, "action is missing", `"drop", "pass" or "limit"`}},
		{"unknown action", []Rule{{Name: "x", Action: "deny", Protocol: udp}}, []string{`rule "x"`, `action = "deny"`, `"drop", "pass" or "limit"`}},
		{"no condition", []Rule{{Name: "x", Action: "drop"}}, []string{`rule "x"`, "no condition", "protocol, src_prefix"}},
		{"unknown protocol", []Rule{{Name: "x", Action: "drop", Protocol: []any{"udpp"}}}, []string{`rule "x"`, "protocol", `"udpp"`, `did you mean "udp"`}},
		{"protocol out of range", []Rule{{Name: "x", Action: "drop", Protocol: []any{int64(256)}}}, []string{`rule "x"`, "protocol", "256", "0-255"}},
		{"protocol all", []Rule{{Name: "x", Action: "drop", Protocol: []any{"all"}}}, []string{`rule "x"`, "protocol", `"all"`}},
		{"bad prefix", []Rule{{Name: "x", Action: "drop", SrcPrefix: []string{"192.0.2/24"}}}, []string{`rule "x"`, "src_prefix", `"192.0.2/24"`, "192.0.2.0/24"}},
		{"host bits", []Rule{{Name: "x", Action: "drop", SrcPrefix: []string{"192.0.2.1/24"}}}, []string{`rule "x"`, "src_prefix", `"192.0.2.1/24"`, "host bits", `did you mean "192.0.2.0/24"`}},
		{"host bits v6", []Rule{{Name: "x", Action: "pass", DstPrefix: []string{"2001:db8::1/32"}}}, []string{`rule "x"`, "dst_prefix", `"2001:db8::1/32"`, `"2001:db8::/32"`}},
		{"prefix too long", []Rule{{Name: "x", Action: "drop", DstPrefix: []string{"192.0.2.0/33"}}}, []string{`rule "x"`, "dst_prefix", `"192.0.2.0/33"`}},
		{"mapped prefix", []Rule{{Name: "x", Action: "drop", DstPrefix: []string{"::ffff:192.0.2.0/120"}}}, []string{`rule "x"`, "dst_prefix", "IPv4-mapped"}},
		{"IPv4 source, IPv6 destination", []Rule{{Name: "x", Action: "drop", SrcPrefix: []string{"192.0.2.0/24", "198.51.100.7"}, DstPrefix: []string{"2001:db8::/32"}}},
			[]string{`rule "x": src_prefix holds only IPv4 prefixes and dst_prefix only IPv6 ones, so no frame can match`, "same family in both fields", "two rules"}},
		{"IPv6 source, IPv4 destination", []Rule{ok, {Name: "y", Action: "pass", Protocol: udp, SrcPrefix: []string{"2001:db8::/32"}, DstPrefix: []string{"192.0.2.0/24"}, DstPort: []any{int64(53)}}},
			[]string{`rule "y": src_prefix holds only IPv6 prefixes and dst_prefix only IPv4 ones, so no frame can match`}},
		{"too many source ports", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: portList(1025)}}, []string{`rule "x": src_port: 1025 entries; at most 1024`, `range such as "1000-1999"`}},
		{"too many destination ports", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: portList(3), DstPort: append(portList(1024), "0-65535")}}, []string{`rule "x": dst_port: 1025 entries; at most 1024`}},
		{"port out of range", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{int64(65536)}}}, []string{`rule "x"`, "dst_port", "65536", "0-65535"}},
		{"negative port", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: []any{int64(-1)}}}, []string{`rule "x"`, "src_port", "-1", "0-65535"}},
		{"range out of range", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"1000-70000"}}}, []string{`rule "x"`, "dst_port", `"1000-70000"`, "0-65535"}},
		{"reversed range", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: []any{"2000-1000"}}}, []string{`rule "x"`, "src_port", `"2000-1000"`, "reversed", `"1000-2000"`}},
		{"bad range", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: []any{"http"}}}, []string{`rule "x"`, "src_port", `"http"`, "1000-1999"}},
		{"port with a sign", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"+80"}}}, []string{`rule "x": dst_port: "+80": write the port as 80 (digits only: no sign, spaces or leading zeros)`}},
		{"port with spaces", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: []any{" 81 "}}}, []string{`rule "x": src_port: " 81 ": write the port as 81`}},
		{"port with a leading zero", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"082"}}}, []string{`rule "x": dst_port: "082": write the port as 82`}},
		{"range with a leading zero", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"080-0090"}}}, []string{`rule "x": dst_port: "080-0090": write the range as "80-90"`}},
		{"range with spaces", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"1000 - 1999"}}}, []string{`rule "x": dst_port: "1000 - 1999": write the range as "1000-1999"`}},
		{"range with a sign", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"+1-+2"}}}, []string{`rule "x": dst_port: "+1-+2": write the range as "1-2"`}},
		{"negative range", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"-5"}}}, []string{`rule "x": dst_port: "-5" is neither a port number nor a range`}},
		{"empty port", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{""}}}, []string{`rule "x": dst_port: "" is neither a port number nor a range`}},
		{"long port string", []Rule{{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{"1234567"}}}, []string{`rule "x": dst_port: "1234567" is out of range; ports are 0-65535`}},
		{"repeated prefix", []Rule{{Name: "x", Action: "drop", SrcPrefix: []string{"192.0.2.0/24", "198.51.100.0/24", "192.0.2.0/24"}}},
			[]string{`rule "x": src_prefix: "192.0.2.0/24" is listed twice; list each prefix once`}},
		{"host prefix spelt twice", []Rule{{Name: "x", Action: "drop", DstPrefix: []string{"10.0.0.1", "10.0.0.1/32"}}},
			[]string{`rule "x": dst_prefix: "10.0.0.1" and "10.0.0.1/32" are the same prefix; list each prefix once`}},
		{"IPv6 prefix spelt twice", []Rule{{Name: "x", Action: "drop", SrcPrefix: []string{"2001:db8::/32", "2001:0DB8:0::/32"}}},
			[]string{`rule "x": src_prefix: "2001:db8::/32" and "2001:0DB8:0::/32" are the same prefix`}},
		{"port float", []Rule{{Name: "x", Action: "drop", Protocol: udp, SrcPort: []any{53.5}}}, []string{`rule "x"`, "src_port", "53.5"}},
		{"ports without protocol", []Rule{{Name: "x", Action: "drop", DstPort: []any{int64(53)}}}, []string{`rule "x"`, "dst_port", "tcp, udp, sctp or udplite"}},
		{"ports with icmp", []Rule{{Name: "x", Action: "drop", Protocol: []any{"udp", "icmp"}, SrcPort: []any{int64(53)}}}, []string{`rule "x"`, "src_port", "icmp carries no ports", "tcp, udp, sctp or udplite"}},
		{"too many rules", many(65), []string{"rule", "65 rules", "at most 64"}},
		{"too many IPv4 prefixes", []Rule{
			{Name: "a", Action: "drop", SrcPrefix: prefixes(60_000, false)},
			{Name: "b", Action: "drop", DstPrefix: prefixes(40_001, false)},
		}, []string{"rule", "100001 IPv4 prefixes", "at most 100000"}},
		{"too many IPv6 prefixes", []Rule{{Name: "a", Action: "drop", SrcPrefix: prefixes(100_001, true)}}, []string{"rule", "100001 IPv6 prefixes", "at most 100000"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := withRules([]any{"udp"}, c.rules...).Init()
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	require.NoError(t, withRules(nil, many(64)...).Init(), "64 rules fit")
	require.NoError(t, withRules(nil,
		Rule{Name: "mixed-src", Action: "drop", SrcPrefix: []string{"192.0.2.0/24", "2001:db8::/32"}, DstPrefix: []string{"2001:db8:1::/48"}},
		Rule{Name: "mixed-dst", Action: "drop", SrcPrefix: []string{"2001:db8::/32"}, DstPrefix: []string{"192.0.2.0/24", "2001:db8:1::/48"}},
		Rule{Name: "one-direction", Action: "drop", SrcPrefix: []string{"192.0.2.0/24"}, Protocol: []any{"ipv6-icmp"}},
	).Init(), "a family in common, or prefixes in one direction only")
	require.NoError(t, withRules(nil, Rule{Name: "a", Action: "drop", Protocol: udp, SrcPort: portList(1024), DstPort: append(portList(1023), int64(1000))}).Init(),
		"1024 port entries per field fit, repeated ones too")
	require.NoError(t, withRules(nil, Rule{Name: "a", Action: "drop", SrcPrefix: prefixes(50_000, false), DstPrefix: prefixes(50_000, false)}).Init(), "100,000 prefixes fit")
	require.NoError(t, withRules(nil, Rule{Name: "a", Action: "drop", Protocol: udp, SrcPrefix: []string{"10.0.0.0/8", "10.0.0.0/16"}, DstPrefix: []string{"10.0.0.0/8"},
		SrcPort: []any{"0", "0-0", int64(0)}, DstPort: []any{"65535", "1-65535"}}).Init(),
		"nested prefixes, a prefix in both directions, port 0 and 65535 written as digits")
}

// TestEmptyConditionList: a condition given as [] is refused, naming the
// rule and the field, rather than matching as if it were left out (any
// value); a field left out still matches any value. The rules are decoded
// from TOML, which tells the two apart.
func TestEmptyConditionList(t *testing.T) {
	const head = "interfaces = [\"eth1\"]\n[[rule]]\nname = \"web\"\naction = \"drop\"\nprotocol = [\"tcp\"]\ndst_port = [80]\n" +
		"[[rule]]\nname = \"scan\"\naction = \"drop\"\n"
	decode := func(t *testing.T, conf string) *XDPDrop {
		t.Helper()
		p := New()
		_, err := toml.Decode(conf, p)
		require.NoError(t, err)
		return p
	}
	for field, rest := range map[string]string{
		"protocol":   "protocol = []\nsrc_prefix = [\"192.0.2.0/24\"]\n",
		"src_prefix": "protocol = [\"tcp\"]\nsrc_prefix = []\n",
		"dst_prefix": "protocol = [\"tcp\"]\ndst_prefix = []\n",
		"src_port":   "protocol = [\"tcp\"]\nsrc_port = []\n",
		"dst_port":   "protocol = [\"tcp\"]\ndst_port = []\ndst_prefix = [\"192.0.2.0/24\"]\n",
	} {
		t.Run(field, func(t *testing.T) {
			err := decode(t, head+rest).Init()
			require.EqualError(t, err, `rule "scan": `+field+` = [] lists no value; leave `+field+` out to match any value, or list the values to match`)
		})
	}
	p := decode(t, head+"protocol = [\"tcp\"]\n")
	require.NoError(t, p.Init(), "fields left out match any value")
	require.Equal(t, bpf.Rule{Name: "scan", Drop: true, Protocols: []uint8{6}}, p.links.policy.Rules[1])
}

// TestDocumentedRulesAreValid: the rule examples of docs/rules.md, and the
// one sample.conf carries commented out, are configs Init accepts.
func TestDocumentedRulesAreValid(t *testing.T) {
	readme, err := os.ReadFile("../../../docs/rules.md")
	require.NoError(t, err)
	var examples []string
	for _, block := range strings.Split(string(readme), "```toml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.HasPrefix(block, "[[inputs.xdp_drop]]") && strings.Contains(block, "\n  [[inputs.xdp_drop.rule]]") {
			examples = append(examples, block)
		}
	}
	require.Len(t, examples, 4, "reflection shedding, the allow-list, the per-source and the per-rule limits")

	var sample strings.Builder
	for _, line := range strings.Split(sampleConfig, "\n") {
		if rest, ok := strings.CutPrefix(line, "  # [[inputs.xdp_drop.rule]]"); ok {
			line = "  [[inputs.xdp_drop.rule]]" + rest
		} else if rest, ok := strings.CutPrefix(line, "  # [inputs.xdp_drop.bans"); ok {
			line = "  [inputs.xdp_drop.bans" + rest
		} else if rest, ok := strings.CutPrefix(line, "  # [inputs.xdp_drop.flowspec"); ok {
			line = "  [inputs.xdp_drop.flowspec" + rest
		} else if rest, ok := strings.CutPrefix(line, "  #   "); ok {
			line = "    " + rest
		}
		if strings.HasPrefix(line, "  drop = ") {
			line = `  drop = ["udp"]`
		}
		if strings.Contains(line, "password_file = ") {
			continue // the sample's key file is not here
		}
		if strings.Contains(line, "api_key_file = ") {
			line = `      api_key = "k3y"` // the sample's file is not here
		}
		if strings.HasPrefix(line, "  # sample_rate = ") || strings.HasPrefix(line, "  # sample_actions = ") {
			line = "  " + line[len("  # "):] // the detection rates sampled frames
			line = strings.Replace(line, `["drop"]`, `["drop", "pass"]`, 1)
		}
		sample.WriteString(line + "\n")
	}
	examples = append(examples, strings.Replace(sample.String(), "interfaces = []", `interfaces = ["eth1"]`, 1))

	for i, ex := range examples {
		var conf struct {
			Inputs struct {
				XDPDrop []XDPDrop `toml:"xdp_drop"`
			} `toml:"inputs"`
		}
		md, err := toml.Decode(ex, &conf)
		require.NoError(t, err, "example %d", i)
		require.Empty(t, md.Undecoded(), "example %d", i)
		require.Len(t, conf.Inputs.XDPDrop, 1)
		p := withDefaults(&conf.Inputs.XDPDrop[0])
		require.NoError(t, p.Init(), "example %d", i)
		require.GreaterOrEqual(t, len(p.links.policy.Rules), 2, "example %d", i)
		if i == len(examples)-1 {
			require.NotNil(t, p.bans, "sample.conf's bans table, uncommented, is valid")
			require.NotNil(t, p.flow.opts, "and its flowspec table")
			require.Len(t, p.flow.opts.peers, 1)
		}
	}
}

// TestLongValuesClipped: an error repeats at most 128 bytes of a config
// value, with its length, however long the value: a 900 kB rule name makes
// a short error, not a 900 kB log line.
func TestLongValuesClipped(t *testing.T) {
	const size = 900_000
	long := strings.Repeat("a", size)
	udp := []any{"udp"}
	cases := map[string]*XDPDrop{
		"rule name":    withRules(nil, Rule{Name: long, Action: "drop", Protocol: udp}),
		"action":       withRules(nil, Rule{Name: "x", Action: long, Protocol: udp}),
		"protocol":     withRules(nil, Rule{Name: "x", Action: "drop", Protocol: []any{long}}),
		"src_prefix":   withRules(nil, Rule{Name: "x", Action: "drop", SrcPrefix: []string{long}}),
		"dst_port":     withRules(nil, Rule{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{long}}),
		"port list":    withRules(nil, Rule{Name: "x", Action: "drop", Protocol: udp, DstPort: []any{[]any{long}}}),
		"drop":         withRules([]any{long}),
		"mode":         withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: udp, Mode: long}),
		"namespace":    withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: udp, Namespace: long}),
		"pin_path":     withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: udp, PinPath: "/" + long}),
		"interfaces":   withDefaults(&XDPDrop{Interfaces: []string{long}, Drop: udp}),
		"glob pattern": withDefaults(&XDPDrop{Interfaces: []string{"[" + long}, Drop: udp}),
		"exclude":      withDefaults(&XDPDrop{Interfaces: []string{"eth*"}, InterfaceExclude: []string{"[" + long}, Drop: udp}),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			err := p.Init()
			require.Error(t, err)
			require.Less(t, len(err.Error()), 1024, "%.300s", err)
			require.Regexp(t, `"[[/]?a{120}`, err.Error(), "the value's start")
			require.Regexp(t, `"…\(90000\d bytes\)`, err.Error(), "the value's length")
		})
	}
}
