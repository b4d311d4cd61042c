package xdp_drop

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/influxdata/telegraf/filter"
)

// maxIfaceName is IFNAMSIZ less the terminating NUL.
const maxIfaceName = 15

// globEscapable are the characters a backslash makes literal in an entry
// of interfaces, as in the glob syntax.
const globEscapable = `*?[]\`

// isPattern reports whether an entry of interfaces holds a glob character
// that no backslash makes literal.
func isPattern(entry string) bool {
	for i := 0; i < len(entry); i++ {
		switch c := entry[i]; {
		case c == '\\' && i+1 < len(entry) && strings.IndexByte(globEscapable, entry[i+1]) >= 0:
			i++
		case c == '*' || c == '?' || c == '[':
			return true
		}
	}
	return false
}

// literalName is the interface an entry without a pattern names: a
// backslash before a glob character makes it literal ('rt\[0\]' names rt[0]).
func literalName(entry string) string {
	var b strings.Builder
	for i := 0; i < len(entry); i++ {
		if entry[i] == '\\' && i+1 < len(entry) && strings.IndexByte(globEscapable, entry[i+1]) >= 0 {
			i++
		}
		b.WriteByte(entry[i])
	}
	return b.String()
}

// hasControl reports whether s holds a NUL or another control character.
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

// tagName is an interface name as line protocol carries it: valid UTF-8
// without control characters, losslessly. Bytes that are not UTF-8, control
// characters (C0, DEL and C1) and the backslash become \xNN; every other
// name is unchanged.
func tagName(name string) string {
	return escapeBytes(name, true)
}

// Printable is a line of text (a log line, an error field) as it may reach
// a terminal: bytes that are not UTF-8 and control characters other than
// tab become \xNN, as in the interface tag, so no escape sequence in an
// interface name or a path acts on the terminal. Backslashes stay, so that
// text quoted with %q is unchanged.
func Printable(line string) string {
	return escapeBytes(line, false)
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

// checkInterfaces checks interfaces and interface_exclude and returns the
// selector of their patterns, nil when every interface is named exactly.
func (x *XDPDrop) checkInterfaces() (filter.Filter, error) {
	switch {
	case x.Interfaces == nil:
		return nil, errors.New(`interfaces is missing; list the interfaces to attach to, e.g. interfaces = ["eth1"] or ["eth*"] (interfaces = [] attaches to nothing)`)
	case len(x.Interfaces) == 0 && len(x.InterfaceExclude) > 0:
		return nil, errors.New("interface_exclude is set but interfaces is empty; list patterns such as \"eth*\" in interfaces")
	case len(x.Interfaces) == 0:
		// The shipped config's default: nothing attached until edited; Start warns.
		return nil, nil
	}
	seen := make(map[string]bool, len(x.Interfaces))
	var patterns []string
	for _, entry := range x.Interfaces {
		name := entry
		if !isPattern(entry) {
			name = literalName(entry)
		}
		switch {
		case entry == "":
			return nil, errors.New(`interfaces has an empty name; list interface names, e.g. interfaces = ["eth1"]`)
		case hasControl(entry):
			return nil, fmt.Errorf("interfaces: %s holds a NUL or control character, which no interface name can; list names as ip link shows them", Quote(entry))
		case len(name) > maxIfaceName && !isPattern(entry):
			return nil, fmt.Errorf("interfaces: %s is longer than the %d characters an interface name can have", Quote(entry), maxIfaceName)
		case strings.ContainsAny(name, "/ \t\n:") || name == "." || name == "..":
			return nil, fmt.Errorf("interfaces: %s is not a valid interface name", Quote(entry))
		case seen[name]:
			return nil, fmt.Errorf("interfaces: %s is listed twice; list each interface once", Quote(entry))
		}
		seen[name] = true
		if isPattern(entry) {
			patterns = append(patterns, entry)
		}
	}
	for _, p := range patterns {
		if _, err := filter.Compile([]string{p}); err != nil {
			return nil, fmt.Errorf("interfaces: %s is not a valid glob pattern: %v", Quote(p), err)
		}
	}
	for _, p := range x.InterfaceExclude {
		if hasControl(p) {
			return nil, fmt.Errorf("interface_exclude: %s holds a NUL or control character, which no interface name can", Quote(p))
		}
		if _, err := filter.Compile([]string{p}); err != nil {
			return nil, fmt.Errorf("interface_exclude: %s is not a valid glob pattern: %v", Quote(p), err)
		}
	}
	exclude, err := filter.Compile(x.InterfaceExclude)
	if err != nil {
		return nil, fmt.Errorf("interface_exclude: %w", err)
	}
	for _, entry := range x.Interfaces {
		if !isPattern(entry) && exclude != nil && exclude.Match(literalName(entry)) {
			return nil, fmt.Errorf("interfaces: %s is named exactly but also matches interface_exclude; remove one of the two", Quote(entry))
		}
	}
	if len(patterns) == 0 {
		if len(x.InterfaceExclude) > 0 {
			return nil, errors.New("interface_exclude is set but interfaces has no glob pattern to exclude from; use patterns such as \"eth*\"")
		}
		return nil, nil
	}
	selector, err := filter.NewIncludeExcludeFilter(patterns, x.InterfaceExclude)
	if err != nil {
		return nil, fmt.Errorf("interfaces: %w", err)
	}
	return selector, nil
}
