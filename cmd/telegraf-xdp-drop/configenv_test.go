package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"
)

// TestConfigExpandsEnv: $VAR and ${VAR} in the config file take their values
// from the environment, as in Telegraf's own config; quotes and backslashes
// in a value stay part of the string, and an unset variable is empty.
func TestConfigExpandsEnv(t *testing.T) {
	t.Setenv("XDP_TEST_IFACE", "eth1")
	t.Setenv("XDP_TEST_ODD", `we"ird\name`)
	t.Setenv("XDP_TEST_PROTO", "udp")
	t.Setenv("XDP_TEST_PIN", "/sys/fs/bpf/xdp_drop")
	os.Unsetenv("XDP_TEST_UNSET")
	path := filepath.Join(t.TempDir(), "xdp_drop.conf")
	require.NoError(t, os.WriteFile(path, []byte(`[[inputs.xdp_drop]]
  interfaces = ["$XDP_TEST_IFACE", "${XDP_TEST_ODD}", "x${XDP_TEST_UNSET}y"]
  drop = ["${XDP_TEST_PROTO}", "$XDP_TEST_PROTO"]
  pin_path = "$XDP_TEST_PIN"
`), 0o600))
	plugin, err := loadConfig(path, noTrustCheck)
	require.NoError(t, err)
	require.Equal(t, []string{"eth1", `we"ird\name`, "xy"}, plugin.Interfaces)
	require.Equal(t, []any{"udp", "udp"}, plugin.Drop)
	require.Equal(t, "/sys/fs/bpf/xdp_drop", plugin.PinPath)
}

// injected is a value that tries to end the string it is put in and add a
// rule of its own, for each kind of quoting.
func injected(quote string) string {
	return "x" + quote + "]\n[[inputs.xdp_drop.rule]]\n  name = 'injected'\n  action = 'drop'\n#"
}

// TestConfigEnvCannotAddTOML: whatever a variable holds, it never changes
// the structure of the config: in a "…" or """…""" string it is escaped
// and taken as it is; in a '…' string or its multi-line form, where it
// cannot be escaped, a value that would end the string is refused with the
// variable's name and line; outside any string only a number or
// true/false is taken; in a comment nothing is expanded.
func TestConfigEnvCannotAddTOML(t *testing.T) {
	cases := []struct {
		name, line, value string
		interfaces        []string // what is decoded; nil when refused
		err               string
	}{
		{"basic", `interfaces = ["$XDP_TEST_V"]`, injected(`"`), []string{injected(`"`)}, ""},
		{"basic braces", `interfaces = ["a${XDP_TEST_V}b"]`, injected(`"`), []string{"a" + injected(`"`) + "b"}, ""},
		{"basic backslash at end", `interfaces = ["$XDP_TEST_V"]`, `x\`, []string{`x\`}, ""},
		{"basic control characters", `interfaces = ["$XDP_TEST_V"]`, "a\tb\rc\x01d\x7fe", []string{"a\tb\rc\x01d\x7fe"}, ""},
		{"multi-line basic", `interfaces = ["""$XDP_TEST_V"""]`, injected(`"""`), []string{injected(`"""`)}, ""},
		{"multi-line basic, quotes at the end", `interfaces = ["""$XDP_TEST_V"""]`, `x""`, []string{`x""`}, ""},
		{"literal", `interfaces = ['$XDP_TEST_V']`, injected(`'`), nil,
			`line 2: $XDP_TEST_V holds 68 bytes with a ' at byte 1, which a '…' literal string cannot hold; use a "…" string there, where values are escaped`},
		{"literal newline", `interfaces = ['${XDP_TEST_V}']`, "x\ny", nil, "line 2: $XDP_TEST_V holds 3 bytes with a newline at byte 1, which a '…' literal string cannot hold"},
		{"literal trailing newline", `api_key = '${XDP_TEST_V}'`, "Zk3vSECRETSECRET\n", nil, "line 2: $XDP_TEST_V holds 17 bytes with a newline at byte 16, which"},
		{"literal control", `interfaces = ['${XDP_TEST_V}']`, "Zk3v\x01", nil, "line 2: $XDP_TEST_V holds 5 bytes with control character 1 at byte 4, which"},
		{"literal plain", `interfaces = ['$XDP_TEST_V']`, `C:\ifaces"x"`, []string{`C:\ifaces"x"`}, ""},
		{"multi-line literal", `interfaces = ['''$XDP_TEST_V''']`, injected(`'''`), nil,
			`line 2: $XDP_TEST_V holds 70 bytes with ''' at byte 1, which a '''…''' literal string cannot hold`},
		{"multi-line literal, quotes beside the string's", "interfaces = ['''$XDP_TEST_V'x''']", `''`, nil,
			`line 2: the value of $XDP_TEST_V ends a '''…''' literal string early`},
		{"multi-line literal, quotes at the end", `interfaces = ['''$XDP_TEST_V''']`, `x''`, []string{`x''`}, ""},
		{"multi-line literal newline", `interfaces = ['''$XDP_TEST_V''']`, "x\ny", []string{"x\ny"}, ""},
		{"outside a string", "interfaces = []\n  dry_run = $XDP_TEST_V", "false\n[[inputs.xdp_drop.rule]]\n  name = 'injected'\n  action = 'drop'", nil,
			`line 3: $XDP_TEST_V stands outside any string, where only a number or true/false is taken, and holds 68 bytes that are neither; quote it ("$XDP_TEST_V") where a string is meant`},
		{"outside a string, unset", "interfaces = []\n  dry_run = ${XDP_TEST_V}", "", nil,
			"line 3: $XDP_TEST_V stands outside any string and is unset or empty"},
		{"outside a string, true", "interfaces = []\n  dry_run = $XDP_TEST_V", "true", []string{}, ""},
		{"comment", "interfaces = [] # was [\"$XDP_TEST_V\"]", injected(`"`), []string{}, ""},
		{"outside a string, long", "interfaces = []\n  dry_run = $XDP_TEST_V", "true\n" + strings.Repeat("a", 200), nil,
			`line 3: $XDP_TEST_V stands outside any string, where only a number or true/false is taken, and holds 205 bytes that are neither; quote it`},
		{"not UTF-8", `interfaces = ["$XDP_TEST_V"]`, "x\xff", nil, `line 2: $XDP_TEST_V holds 2 bytes with a byte that is not UTF-8 at byte 1, and a TOML file can hold only UTF-8`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("XDP_TEST_V", c.value)
			path := filepath.Join(t.TempDir(), "xdp_drop.conf")
			require.NoError(t, os.WriteFile(path, []byte("[[inputs.xdp_drop]]\n  "+c.line+"\n"), 0o600))
			plugin, err := loadConfig(path, noTrustCheck)
			if c.err != "" {
				require.ErrorContains(t, err, "config "+path+": "+c.err)
				return
			}
			require.NoError(t, err)
			require.Empty(t, plugin.Rules, "no rule but the file's")
			require.Equal(t, c.interfaces, plugin.Interfaces)
			require.Equal(t, strings.Contains(c.line, "dry_run"), plugin.DryRun)
		})
	}
}

// TestExpandEnv: the text expandEnv hands the decoder, for what the table
// above does not show: a $ with no name after it stays, quoted keys are
// strings too, a number outside a string is taken, an unterminated string
// is left for the decoder to report.
func TestExpandEnv(t *testing.T) {
	cases := []struct{ doc, value, want, err string }{
		{`a = "$ ${} $1 cost$"`, "v", `a = "$ ${} $1 cost$"`, ""},
		{`"$XDP_TEST_V" = 1`, `a"b`, `"a\"b" = 1`, ""},
		{`rate = $XDP_TEST_V`, "1000", `rate = 1000`, ""},
		{`rate = $XDP_TEST_V`, "-1.5e3", `rate = -1.5e3`, ""},
		{`rate = $XDP_TEST_V`, "0x10", "", `line 1: $XDP_TEST_V stands outside any string, where only a number or true/false is taken, and holds 4 bytes that are neither`},
		{`rate = $XDP_TEST_V`, "1, 2", "", `holds 4 bytes that are neither`},
		{"a = 1 # $XDP_TEST_V\nb = '$XDP_TEST_V'", "v", "a = 1 # $XDP_TEST_V\nb = 'v'", ""},
		{"a = \"\"\"\nx\n$XDP_TEST_V\"\"\"", `v"`, "a = \"\"\"\nx\nv\\\"\"\"\"", ""},
		{"a = '''\nx\n${XDP_TEST_V}'''", "'''", "", `line 3: $XDP_TEST_V holds 3 bytes with ''' at byte 0`},
		{`a = "$XDP_TEST_V`, "v", `a = "$XDP_TEST_V`, ""},
	}
	for _, c := range cases {
		t.Setenv("XDP_TEST_V", c.value)
		got, err := expandEnv(c.doc)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.doc)
			continue
		}
		require.NoError(t, err, c.doc)
		require.Equal(t, c.want, got, c.doc)
	}
}

// FuzzExpandEnvKeepsStructure: whatever a variable holds and whatever
// stands next to it in the string, the expanded document is refused or
// decodes to the same keys as the file, and to the value itself when
// nothing stands next to it. The seeds run with go test.
func FuzzExpandEnvKeepsStructure(f *testing.F) {
	values := []string{`"`, `'`, `''`, `'''`, `"""`, `\`, "\n", "\r\n", "\t", "\x01", "é", "$", "${XDP_FUZZ}",
		"x\"]\n[b]\nc = 1\n#", "x']\n[b]\nc = 1\n#", "x'''\n[b]\nc = 1\n#", "x\"\"\"\n[b]\nc = 1\n#", "1\n[b]", "true"}
	sides := []string{"", "x", `'`, `''`, `"`, `""`}
	for kind := range 5 {
		for _, v := range values {
			for _, s := range sides {
				f.Add(kind, s, v, "")
				f.Add(kind, "", v, s)
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind int, prefix, value, suffix string) {
		q := quoting(((kind % 5) + 5) % 5)
		doc := "a = " + q.delimiter() + prefix + "${XDP_FUZZ}" + suffix + q.delimiter() + "\nb = 1\n"
		var plain map[string]any
		if _, err := toml.Decode(strings.ReplaceAll(doc, "${XDP_FUZZ}", ""), &plain); err != nil {
			return // the file itself is not TOML: nothing to keep
		}
		if strings.ContainsRune(value, 0) {
			return // no environment variable holds a NUL
		}
		t.Setenv("XDP_FUZZ", value)
		expanded, err := expandEnv(doc)
		if err != nil {
			return
		}
		var got map[string]any
		if _, err := toml.Decode(expanded, &got); err != nil {
			return // refused by the decoder: nothing added
		}
		require.Equal(t, len(plain), len(got), "keys of %q", expanded)
		require.Equal(t, int64(1), got["b"], "%q", expanded)
		if prefix == "" && suffix == "" && q != bare && !(q == multiLiteral && strings.HasPrefix(value, "\n")) {
			require.Equal(t, value, got["a"], "%q", expanded)
		}
	})
}

// TestConfigEnvNeverEchoesValue: an error about a variable says its length
// and what is wrong, never a byte of what it holds: any variable may be a key.
func TestConfigEnvNeverEchoesValue(t *testing.T) {
	const secret = "Zk3vQ9secretBouncerKey0123456789"
	cases := []struct{ line, value, err string }{
		{"api_key = ${XDP_TEST_V}", secret, "line 2: $XDP_TEST_V stands outside any string, where only a number or true/false is taken, and holds 32 bytes that are neither"},
		{"api_key = '${XDP_TEST_V}'", secret + "\n", "line 2: $XDP_TEST_V holds 33 bytes with a newline at byte 32, which a '…' literal string cannot hold"},
		{"api_key = '${XDP_TEST_V}'", secret + "\x01", "line 2: $XDP_TEST_V holds 33 bytes with control character 1 at byte 32"},
		{"api_key = '''${XDP_TEST_V}'''", secret + "'''", "line 2: $XDP_TEST_V holds 35 bytes with ''' at byte 32"},
		{"api_key = '''${XDP_TEST_V}'''", secret + "\r", "line 2: $XDP_TEST_V holds 33 bytes with a carriage return at byte 32"},
		{`api_key = "${XDP_TEST_V}"`, secret + "\xff", "line 2: $XDP_TEST_V holds 33 bytes with a byte that is not UTF-8 at byte 32"},
	}
	for _, c := range cases {
		t.Setenv("XDP_TEST_V", c.value)
		path := filepath.Join(t.TempDir(), "xdp_drop.conf")
		require.NoError(t, os.WriteFile(path, []byte("[[inputs.xdp_drop]]\n  "+c.line+"\n"), 0o600))
		_, err := loadConfig(path, noTrustCheck)
		require.ErrorContains(t, err, c.err, c.line)
		for n := 4; n <= len(secret); n += 4 {
			require.NotContains(t, err.Error(), secret[:n], c.line)
		}
	}
}
