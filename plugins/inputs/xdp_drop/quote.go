package xdp_drop

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxEcho is how much of a config value a message repeats: a rule name or
// an interface pattern whole, a 900 kB value not.
const maxEcho = 128

// Quote is a config value as a message repeats it: quoted as %q quotes, and
// past maxEcho bytes clipped, with its length, so that a huge value makes no
// huge log line.
func Quote(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); i++ {
		cut-- // not within a character
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// quoteAny is Quote for a decoded value of an unexpected type.
func quoteAny(v any) string {
	return Quote(fmt.Sprint(v))
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
