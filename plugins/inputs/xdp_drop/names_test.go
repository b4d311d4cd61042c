package xdp_drop

import (
	"testing"

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
