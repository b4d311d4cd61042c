package xdp_drop

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestNamesWithControlCharacters: a NUL or control character in an entry
// is refused in Init, naming the entry.
func TestNamesWithControlCharacters(t *testing.T) {
	for _, c := range []struct {
		ifaces, exclude []string
		want            string
	}{
		{[]string{"rt\x00x"}, nil, `interfaces: "rt\x00x" holds a NUL or control character, which no interface name can; list names as ip link shows them`},
		{[]string{"eth\x01"}, nil, `interfaces: "eth\x01" holds a NUL or control character`},
		{[]string{"eth*\x7f"}, nil, `interfaces: "eth*\x7f" holds a NUL or control character`},
		{[]string{"eth*"}, []string{"eth1\x00"}, `interface_exclude: "eth1\x00" holds a NUL or control character, which no interface name can`},
	} {
		p := withDefaults(&XDPDrop{Interfaces: c.ifaces, InterfaceExclude: c.exclude, Drop: []any{"all"}})
		err := p.Init()
		require.Error(t, err, "%q", c.ifaces)
		require.Contains(t, err.Error(), c.want)
	}
}

// TestLiteralNamesWithGlobCharacters: a backslash makes a glob character
// literal; an entry whose glob characters are all escaped names one
// interface exactly.
func TestLiteralNamesWithGlobCharacters(t *testing.T) {
	for _, c := range []struct {
		entry   string
		pattern bool
		literal string
	}{
		{"eth1", false, "eth1"},
		{"rt[0]", true, ""},
		{`rt\[0\]`, false, "rt[0]"},
		{`rt\*`, false, "rt*"},
		{`a\?b`, false, "a?b"},
		{`a\\b`, false, `a\b`},
		{`a\b`, false, `a\b`},
		{`rt\[0]*`, true, ""},
	} {
		require.Equal(t, c.pattern, isPattern(c.entry), c.entry)
		if !c.pattern {
			require.Equal(t, c.literal, literalName(c.entry), c.entry)
		}
	}
	p := withDefaults(&XDPDrop{Interfaces: []string{`rt\[0\]`, "eth*"}, Drop: []any{"all"}})
	require.NoError(t, p.Init())
	require.Len(t, p.links.ifaces, 1)
	require.Equal(t, "rt[0]", p.links.ifaces[0].name)

	p = withDefaults(&XDPDrop{Interfaces: []string{`rt\[0\]`, "rt[0]x"}, InterfaceExclude: []string{`rt\[0\]`}, Drop: []any{"all"}})
	require.ErrorContains(t, p.Init(), `interfaces: "rt\\[0\\]" is named exactly but also matches interface_exclude`)
	p = withDefaults(&XDPDrop{Interfaces: []string{`abcdefghijklmn\*`}, Drop: []any{"all"}})
	require.NoError(t, p.Init(), "15 characters once unescaped")
}

// TestTagNameLossless: names that are valid UTF-8 without control
// characters or backslashes are unchanged; other bytes become \xNN, so the
// tag is valid UTF-8 and two names never share a tag.
func TestTagNameLossless(t *testing.T) {
	for name, want := range map[string]string{
		"eth1":      "eth1",
		"rt[0]":     "rt[0]",
		"wlän0":     "wlän0",
		"rt\xff":    `rt\xff`,
		`rt\xff`:    `rt\x5cxff`,
		"a\xc3":     `a\xc3`,
		"a\x01b":    `a\x01b`,
		"\xe4\xbd":  `\xe4\xbd`,
		"é\xff\xfe": `é\xff\xfe`,
	} {
		got := tagName(name)
		require.Equal(t, want, got, "%q", name)
		require.True(t, utf8.ValidString(got))
	}
}
