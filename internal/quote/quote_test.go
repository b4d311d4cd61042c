package quote

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestValue: a value is quoted as %q quotes it; past 128 bytes it is cut at
// a character's start and its length follows.
func TestValue(t *testing.T) {
	require.Equal(t, `"dns"`, Value("dns"))
	require.Equal(t, `"eth\x1b[1m\xff"`, Value("eth\x1b[1m\xff"))
	v := strings.Repeat("a", 128)
	require.Equal(t, `"`+v+`"`, Value(v))
	require.Equal(t, `"`+v+`"…(129 bytes)`, Value(v+"b"))
	require.Equal(t, `"`+v[:127]+`"…(129 bytes)`, Value(v[:127]+"é"), "not within a character")
	for _, s := range []string{"", "eth0", `a"b\c`, "wlän0", "x\x00\t\n\u009b\xff", v} {
		require.Equal(t, fmt.Sprintf("%q", s), Value(s), "as %%q up to 128 bytes")
	}
	for _, l := range [][]string{nil, {}, {"eth1"}, {"eth1", "rt*", "x\x1b\xff"}} {
		require.Equal(t, fmt.Sprintf("%q", l), List(l), "as %%q writes a []string")
	}
	require.Equal(t, `["a" "`+v+`"…(129 bytes)]`, List([]string{"a", v + "b"}), "each clipped")
	require.Equal(t, `'B'`, Rune('B'))
	require.Equal(t, `'\x00'`, Rune(0))
}

// TestTag: names that are valid UTF-8 without control characters or
// backslashes are unchanged; other bytes become \xNN, so the tag is valid
// UTF-8 and two names never share a tag.
func TestTag(t *testing.T) {
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
		got := Tag(name)
		require.Equal(t, want, got, "%q", name)
		require.True(t, utf8.ValidString(got))
	}
	require.Equal(t, `rt\xc2\x9b\x5c`, Tag("rt\u009b\\"), "C1 controls too")
}

// TestLine: control characters but tab and bytes that are not UTF-8 become
// \xNN; backslashes stay, so text quoted with Value is unchanged.
func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"interface \"eth1\": attached":  "interface \"eth1\": attached",
		"left /sys/fs/bpf/x\x1b[2J\xff": `left /sys/fs/bpf/x\x1b[2J\xff`,
		"a\tb\rc\x00d\u009be\x7f":       `a` + "\t" + `b\x0dc\x00d\xc2\x9be\x7f`,
		Value("x\x1b\xff\\"):            `"x\x1b\xff\\"`,
		"wlän0 \\ ok":                   "wlän0 \\ ok",
	} {
		require.Equal(t, want, Line(in), "%q", in)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0", 999: "999", 1000: "1,000", 123456: "123,456", 1234567: "1,234,567",
		18446744073709551615: "18,446,744,073,709,551,615",
	} {
		require.Equal(t, want, Thousands(n), "%d", n)
	}
}
