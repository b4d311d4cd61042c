package xdp_drop

import (
	"errors"
	"fmt"
	"strings"

	"github.com/influxdata/telegraf/filter"
	"github.com/xdp-drop/xdp_drop/internal/quote"
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
			return nil, fmt.Errorf("interfaces: %s holds a NUL or control character, which no interface name can; list names as ip link shows them", quote.Value(entry))
		case len(name) > maxIfaceName && !isPattern(entry):
			return nil, fmt.Errorf("interfaces: %s is longer than the %d characters an interface name can have", quote.Value(entry), maxIfaceName)
		case strings.ContainsAny(name, "/ \t\n:") || name == "." || name == "..":
			return nil, fmt.Errorf("interfaces: %s is not a valid interface name", quote.Value(entry))
		case seen[name]:
			return nil, fmt.Errorf("interfaces: %s is listed twice; list each interface once", quote.Value(entry))
		}
		seen[name] = true
		if isPattern(entry) {
			patterns = append(patterns, entry)
		}
	}
	for _, p := range patterns {
		if _, err := filter.Compile([]string{p}); err != nil {
			return nil, fmt.Errorf("interfaces: %s is not a valid glob pattern: %v", quote.Value(p), err)
		}
	}
	for _, p := range x.InterfaceExclude {
		if hasControl(p) {
			return nil, fmt.Errorf("interface_exclude: %s holds a NUL or control character, which no interface name can", quote.Value(p))
		}
		if _, err := filter.Compile([]string{p}); err != nil {
			return nil, fmt.Errorf("interface_exclude: %s is not a valid glob pattern: %v", quote.Value(p), err)
		}
	}
	exclude, err := filter.Compile(x.InterfaceExclude)
	if err != nil {
		return nil, fmt.Errorf("interface_exclude: %w", err)
	}
	for _, entry := range x.Interfaces {
		if !isPattern(entry) && exclude != nil && exclude.Match(literalName(entry)) {
			return nil, fmt.Errorf("interfaces: %s is named exactly but also matches interface_exclude; remove one of the two", quote.Value(entry))
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
