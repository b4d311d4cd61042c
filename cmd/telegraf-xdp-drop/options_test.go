package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnknownOptionListsEveryOption: an unknown key is refused with the
// list of options taken from the plugin's fields, and that list is exactly
// the options sample.conf documents, in the same order.
func TestUnknownOptionListsEveryOption(t *testing.T) {
	sample, err := os.ReadFile("../../sample.conf")
	require.NoError(t, err)
	var documented []string
	// Options, and the tables of rules (shown once however many examples).
	for _, m := range regexp.MustCompile(`(?m)^  (?:# )?(?:([a-z][a-z0-9_]*) = |\[\[?inputs\.xdp_drop\.([a-z_]+)\]\]?)`).FindAllStringSubmatch(string(sample), -1) {
		key := m[1] + m[2]
		if !slices.Contains(documented, key) {
			documented = append(documented, key)
		}
	}
	require.Equal(t, strings.Join(documented, ", "), options)

	conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  dropp = [\"all\"]\n"), 0o600))
	_, err = loadConfig(conf, noTrustCheck)
	require.EqualError(t, err, "config "+conf+`:3: unknown option "inputs.xdp_drop.dropp"; [[inputs.xdp_drop]] takes `+strings.Join(documented, ", "))
}

// TestKeysAreCaseSensitive: the TOML decoder matches keys to fields
// whatever their case; the loader refuses a key spelled in another case
// than the documented one, naming it and the spelling to use, in the
// section, in a rule (table or inline) and in the section names.
func TestKeysAreCaseSensitive(t *testing.T) {
	const head = "[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  drop = [\"udp\"]\n"
	const rule = "  [[inputs.xdp_drop.rule]]\n    name = \"mgmt\"\n    action = \"pass\"\n    src_prefix = [\"192.0.2.0/24\"]\n"
	cases := []struct {
		name, config, want string
		line               int // of the key; 0: not known
	}{
		{"option upper case", "[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  DROP = [\"all\"]\n",
			`unknown option "inputs.xdp_drop.DROP" (keys are case-sensitive); did you mean "drop"?`, 3},
		{"option capitalised", "[[inputs.xdp_drop]]\n  Interfaces = [\"eth1\"]\n  drop = [\"all\"]\n",
			`unknown option "inputs.xdp_drop.Interfaces" (keys are case-sensitive); did you mean "interfaces"?`, 2},
		{"option mixed case", head + "  handover_Timeout = \"3s\"\n",
			`unknown option "inputs.xdp_drop.handover_Timeout" (keys are case-sensitive); did you mean "handover_timeout"?`, 4},
		{"rule key", head + rule + "  [[inputs.xdp_drop.rule]]\n    name = \"dns\"\n    Action = \"pass\"\n    protocol = [\"udp\"]\n",
			`rule "dns": unknown key "Action" (keys are case-sensitive); did you mean "action"?`, 10},
		{"rule name key", head + rule + "  [[inputs.xdp_drop.rule]]\n    Name = \"dns\"\n    action = \"pass\"\n    protocol = [\"udp\"]\n",
			`rule "dns": unknown key "Name" (keys are case-sensitive); did you mean "name"?`, 9},
		{"inline rule key", head + "  rule = [{name = \"dns\", action = \"pass\", protocol = [\"udp\"], DST_PORT = [53]}]\n",
			`rule "dns": unknown key "DST_PORT" (keys are case-sensitive); did you mean "dst_port"?`, 4},
		{"rule table", head + "  [[inputs.xdp_drop.Rule]]\n    name = \"mgmt\"\n    action = \"pass\"\n    protocol = [\"udp\"]\n",
			`unknown option "inputs.xdp_drop.Rule" (keys are case-sensitive); did you mean "rule"?`, 4},
		{"inputs table", "[[Inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  drop = [\"all\"]\n",
			`unknown section or key "Inputs.xdp_drop" (keys are case-sensitive); did you mean [[inputs.xdp_drop]]?`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
			require.NoError(t, os.WriteFile(conf, []byte(c.config), 0o600))
			_, err := loadConfig(conf, noTrustCheck)
			at := ""
			if c.line > 0 {
				at = fmt.Sprintf(":%d", c.line)
			}
			require.EqualError(t, err, "config "+conf+at+": "+c.want)
		})
	}

	// Keys of the section and of rules, spelled as documented, load.
	conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(head+"  dry_run = true\n  handover_timeout = \"3s\"\n"+rule+
		"  [[inputs.xdp_drop.rule]]\n    name = \"dns\"\n    action = \"drop\"\n    protocol = [\"udp\"]\n    dst_prefix = [\"198.51.100.53/32\"]\n    src_port = [\"1024-65535\"]\n    dst_port = [53]\n"), 0o600))
	p, err := loadConfig(conf, noTrustCheck)
	require.NoError(t, err)
	require.Len(t, p.Rules, 2)
	require.Equal(t, []any{int64(53)}, p.Rules[1].DstPort)
}

// TestRuleTypeErrorNamesTheRule: a value of the wrong TOML type inside a
// rule is refused naming the rule by position and name, the key and the
// line, and how to write it; a rule without a (string) name is named by
// position alone.
func TestRuleTypeErrorNamesTheRule(t *testing.T) {
	const head = "[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  drop = [\"udp\"]\n" +
		"  [[inputs.xdp_drop.rule]]\n    name = \"mgmt\"\n    action = \"pass\"\n    src_prefix = [\"192.0.2.0/24\"]\n" +
		"  [[inputs.xdp_drop.rule]]\n    name = \"ntp\"\n    action = \"drop\"\n    protocol = [\"udp\"]\n    src_port = [123]\n"
	cases := []struct{ name, rule, want string }{
		{"port not a list", "  [[inputs.xdp_drop.rule]]\n    name = \"dns\"\n    action = \"pass\"\n    protocol = [\"udp\"]\n    dst_port = 53\n",
			`rule 3 ("dns"): dst_port: line 17: incompatible types: TOML value has type int64; destination has type slice; write a list in brackets, e.g. dst_port = [...]`},
		{"prefix not a string", "  [[inputs.xdp_drop.rule]]\n    name = \"dns\"\n    action = \"pass\"\n    src_prefix = [\"192.0.2.0/24\", 10]\n",
			`rule 3 ("dns"): src_prefix: line 16: incompatible types: TOML value has type int64; destination has type string; write each entry in quotes, e.g. src_prefix = ["..."]`},
		{"name not a string", "  [[inputs.xdp_drop.rule]]\n    name = 3\n    action = \"pass\"\n    protocol = [\"udp\"]\n",
			`rule 3: name: line 14: incompatible types: TOML value has type int64; destination has type string; write a string in quotes, e.g. name = "..."`},
		{"inline rule", "  rule = [{name = \"dns\", action = \"pass\", protocol = \"udp\"}]\n",
			`rule 1 ("dns"): protocol: line 13: incompatible types: TOML value has type string; destination has type slice; write a list in brackets, e.g. protocol = [...]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
			text := head + c.rule
			if strings.HasPrefix(c.rule, "  rule = ") {
				text = "[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  drop = [\"udp\"]\n" + strings.Repeat("\n", 9) + c.rule
			}
			require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
			_, err := loadConfig(conf, noTrustCheck)
			require.EqualError(t, err, "config "+conf+": "+c.want)
		})
	}
}

// TestLongKeysAndNamesClipped: the loader's errors repeat at most 128 bytes
// of an unknown key or a rule name: a 900 kB name makes a short error.
func TestLongKeysAndNamesClipped(t *testing.T) {
	long := strings.Repeat("a", 900_000)
	head := "[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  drop = [\"udp\"]\n"
	for name, text := range map[string]string{
		"unknown option":      head + "  " + long + " = 1\n",
		"unknown rule key":    head + "  [[inputs.xdp_drop.rule]]\n    name = \"" + long + "\"\n    action = \"drop\"\n    protocol = [\"udp\"]\n    port = [1]\n",
		"rule type error":     head + "  [[inputs.xdp_drop.rule]]\n    name = \"" + long + "\"\n    action = \"drop\"\n    protocol = \"udp\"\n",
		"unknown section key": head + "[" + long + "]\n",
	} {
		t.Run(name, func(t *testing.T) {
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
			require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
			_, err := loadConfig(conf, noTrustCheck)
			require.Error(t, err)
			require.Less(t, len(err.Error()), 1024, "%.300s", err)
			require.Regexp(t, `"…\(9000\d\d bytes\)`, err.Error())
		})
	}
}
