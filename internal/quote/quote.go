// Package quote writes what an operator reads: a value quoted in a message
// or log line (Value, the one way to quote one), a composed line made safe
// for a terminal (Line), a name as a line-protocol tag (Tag), a count with
// thousands separators (Thousands). It imports only the standard library,
// so the plugin, the binary and bpf all use it.
package quote

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxEcho is how much of a value a message repeats: a rule name or an
// interface pattern whole, a 900 kB value not.
const maxEcho = 128

// Value is a value as a message repeats it: quoted as strconv.Quote quotes
// (and %q), and past maxEcho bytes clipped, with its length, so that a huge
// value makes no huge log line.
func Value(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); i++ {
		cut-- // not within a character
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// List is a list of values as a message repeats it, each as Value quotes
// it: ["eth1" "eth*"], as %q writes a []string.
func List(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = Value(v)
	}
	return "[" + strings.Join(quoted, " ") + "]"
}

// Rune is one character of a value as a message names it: 'B', '\x00'.
func Rune(r rune) string {
	return strconv.QuoteRune(r)
}

// Line is a line of text (a log line, an error field) as it may reach a
// terminal: bytes that are not UTF-8 and control characters other than tab
// become \xNN, as in Tag, so no escape sequence in an interface name or a
// path acts on the terminal. Backslashes stay, so that text quoted with
// Value is unchanged.
func Line(line string) string {
	return escapeBytes(line, false)
}

// Tag is a name (an interface's) as line protocol carries it: valid UTF-8
// without control characters, losslessly. Bytes that are not UTF-8,
// control characters (C0, DEL and C1) and the backslash become \xNN; every
// other name is unchanged.
func Tag(name string) string {
	return escapeBytes(name, true)
}

// escapeBytes writes the bytes of s that are not UTF-8, its control
// characters (but tab, unless backslash) and, when backslash is set, its
// backslashes as \xNN.
func escapeBytes(s string, backslash bool) string {
	escape := func(r rune, size int) bool {
		return r == utf8.RuneError && size <= 1 || unicode.IsControl(r) && (r != '\t' || backslash) || backslash && r == '\\'
	}
	clean := true
	for i := 0; i < len(s) && clean; {
		r, size := utf8.DecodeRuneInString(s[i:])
		clean = !escape(r, size)
		i += size
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !escape(r, size) {
			b.WriteString(s[i : i+size])
		} else {
			for j := i; j < i+size; j++ {
				fmt.Fprintf(&b, `\x%02x`, s[j])
			}
		}
		i += size
	}
	return b.String()
}

// Thousands writes a count with a comma between thousands, as every
// operator-facing count is written: 1,234,567.
func Thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
