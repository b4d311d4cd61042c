package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"
)

// quoting is where in the TOML document a $VAR stands.
type quoting int

const (
	bare         quoting = iota // outside any string
	basic                       // "…"
	multiBasic                  // """…"""
	literal                     // '…'
	multiLiteral                // '''…'''
)

func (q quoting) String() string {
	return [...]string{"outside any string", `a "…" string`, `a """…""" string`, "a '…' literal string", "a '''…''' literal string"}[q]
}

// delimiter is what opens and closes a string of this quoting.
func (q quoting) delimiter() string {
	return [...]string{"", `"`, `"""`, "'", "'''"}[q]
}

// expandEnv substitutes $NAME and ${NAME} (a letter or _, then letters,
// digits and _) with the variable's value from the environment, without
// ever letting a value change the document's structure:
//   - in a "…" or """…""" string, the value is escaped for it;
//   - in a '…' literal string or its multi-line form, which have no
//     escapes, a value that the string cannot hold as it is (a quote that
//     would end it, a control character) is refused;
//   - outside any string, only a number or true/false is taken;
//   - comments are left as they are.
//
// An unset variable is empty. A $ followed by no name stays as it is.
func expandEnv(doc string) (string, error) { return expandEnvNoting(doc, nil) }

// emptyVar is a variable a string named that was unset or empty, and the
// line it stood on: an option left empty by it says which.
type emptyVar struct {
	name string
	line int
	set  bool
}

// expandEnvNoting is expandEnv that notes, when noted is not nil, the
// variables in strings that were unset or empty.
func expandEnvNoting(doc string, noted *[]emptyVar) (string, error) {
	var out strings.Builder
	line := 1
	for i := 0; i < len(doc); {
		switch q := quotingAt(doc[i:]); {
		case doc[i] == '#':
			end := strings.IndexByte(doc[i:], '\n')
			if end < 0 {
				end = len(doc) - i
			}
			out.WriteString(doc[i : i+end])
			i += end
		case q != bare:
			open := len(q.delimiter())
			content, end, ok := stringContent(doc[i+open:], q)
			if !ok {
				// Unterminated: the decoder reports it where it is.
				out.WriteString(doc[i:])
				return out.String(), nil
			}
			expanded, err := expandString(content, q, line, noted)
			if err != nil {
				return "", err
			}
			out.WriteString(q.delimiter() + expanded + doc[i+open+len(content):i+open+end])
			line += strings.Count(doc[i:i+open+end], "\n")
			i += open + end
		case doc[i] == '$':
			name, w := varAt(doc[i:])
			if name == "" {
				out.WriteByte('$')
				i++
				continue
			}
			value, err := bareValue(name, line)
			if err != nil {
				return "", err
			}
			out.WriteString(value)
			i += w
		default:
			if doc[i] == '\n' {
				line++
			}
			out.WriteByte(doc[i])
			i++
		}
	}
	return out.String(), nil
}

// quotingAt tells which string, if any, starts at the beginning of s.
func quotingAt(s string) quoting {
	switch {
	case strings.HasPrefix(s, `"""`):
		return multiBasic
	case strings.HasPrefix(s, `"`):
		return basic
	case strings.HasPrefix(s, "'''"):
		return multiLiteral
	case strings.HasPrefix(s, "'"):
		return literal
	}
	return bare
}

// stringContent finds the end of a string of quoting q in s, the text
// after its opening delimiter: content is what the string holds as
// written, end the index just past its closing delimiter; ok is false when
// the string is not closed.
func stringContent(s string, q quoting) (content string, end int, ok bool) {
	quote := q.delimiter()[0]
	multi := q == multiBasic || q == multiLiteral
	for j := 0; j < len(s); j++ {
		switch {
		case s[j] == '\\' && (q == basic || q == multiBasic):
			j++ // the escaped character
		case s[j] == '\n' && !multi:
			return "", 0, false
		case s[j] == quote && !multi:
			return s[:j], j + 1, true
		case s[j] == quote && strings.HasPrefix(s[j:], q.delimiter()):
			// Up to two more quotes before the delimiter are content.
			run := 3
			for j+run < len(s) && s[j+run] == quote {
				run++
			}
			return s[:j+run-3], j + run, true
		}
	}
	return "", 0, false
}

// expandString expands the variables in content, a string of quoting q
// that starts on the given line.
func expandString(content string, q quoting, start int, noted *[]emptyVar) (string, error) {
	line := start
	var out strings.Builder
	var names []string
	for i := 0; i < len(content); {
		name, w := varAt(content[i:])
		if name == "" {
			if content[i] == '\n' {
				line++
			}
			out.WriteByte(content[i])
			i++
			continue
		}
		raw, set := os.LookupEnv(name)
		if raw == "" && noted != nil {
			*noted = append(*noted, emptyVar{name, line, set})
		}
		value, err := quotedValue(name, raw, q, line)
		if err != nil {
			return "", err
		}
		out.WriteString(value)
		names = append(names, "$"+name)
		i += w
	}
	expanded := out.String()
	// A literal string's value may hold quotes that, next to the string's
	// own, close it early: the string must still end where it ended.
	if names != nil {
		if got, _, ok := stringContent(expanded+q.delimiter(), q); !ok || got != expanded {
			return "", fmt.Errorf("line %d: the value of %s ends %s early, with the quotes around it; use a \"…\" string, where values are escaped",
				start, strings.Join(names, ", "), q)
		}
	}
	return expanded, nil
}

// quotedValue is the value of variable name as it is written in a string
// of quoting q, or an error when that string cannot hold it.
func quotedValue(name, value string, q quoting, line int) (string, error) {
	if !utf8.ValidString(value) {
		return "", fmt.Errorf("line %d: $%s holds %s, and a TOML file can hold only UTF-8", line, name, describe(value, func(r rune) bool { return r == utf8.RuneError }))
	}
	switch q {
	case basic, multiBasic:
		return escapeBasic(value), nil
	case literal:
		if bad := func(r rune) bool { return r == '\'' || isControl(r) }; strings.ContainsFunc(value, bad) {
			return "", fmt.Errorf("line %d: $%s holds %s, which %s cannot hold; "+
				"use a \"…\" string there, where values are escaped", line, name, describe(value, bad), q)
		}
	case multiLiteral:
		if i := strings.Index(value, "'''"); i >= 0 {
			return "", fmt.Errorf("line %d: $%s holds %d bytes with ''' at byte %d, which %s cannot hold; "+
				"use a \"\"\"…\"\"\" string there, where values are escaped", line, name, len(value), i, q)
		}
		if bad := func(r rune) bool { return r != '\n' && isControl(r) }; strings.ContainsFunc(value, bad) {
			return "", fmt.Errorf("line %d: $%s holds %s, which %s cannot hold; "+
				"use a \"\"\"…\"\"\" string there, where values are escaped", line, name, describe(value, bad), q)
		}
	}
	return value, nil
}

// describe says what is wrong with a variable's value without a byte of
// it: any variable may hold a secret, and errors reach logs and terminals.
func describe(value string, bad func(rune) bool) string {
	for i, r := range value {
		if !bad(r) {
			continue
		}
		what := fmt.Sprintf("control character %d", r)
		switch {
		case r == utf8.RuneError:
			what = "a byte that is not UTF-8"
		case r == '\n':
			what = "a newline"
		case r == '\r':
			what = "a carriage return"
		case r == '\'':
			what = "a '"
		}
		return fmt.Sprintf("%d bytes with %s at byte %d", len(value), what, i)
	}
	return fmt.Sprintf("%d bytes", len(value))
}

// scalar is what a variable outside a string may hold: one number or
// boolean, which can add no key, table or value of its own.
var scalar = regexp.MustCompile(`^(?:true|false|[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)$`)

func bareValue(name string, line int) (string, error) {
	value := os.Getenv(name)
	if value == "" {
		return "", fmt.Errorf("line %d: $%s stands outside any string and is unset or empty; set it to a number or true/false, or quote it (\"$%s\") where a string is meant",
			line, name, name)
	}
	if !scalar.MatchString(value) {
		return "", fmt.Errorf("line %d: $%s stands outside any string, where only a number or true/false is taken, and holds %d bytes that are neither; quote it (\"$%s\") where a string is meant",
			line, name, len(value), name)
	}
	return value, nil
}

// varAt reads a $NAME or ${NAME} at the start of s: its name and length,
// or "" when s starts with no variable.
func varAt(s string) (string, int) {
	if len(s) < 2 || s[0] != '$' {
		return "", 0
	}
	if s[1] == '{' {
		end := strings.IndexByte(s, '}')
		if end < 0 || !validName(s[2:end]) {
			return "", 0
		}
		return s[2:end], end + 1
	}
	n := 1
	for n < len(s) && isNameByte(s[n], n == 1) {
		n++
	}
	return s[1:n], n
}

func validName(name string) bool {
	for i := range len(name) {
		if !isNameByte(name[i], i == 0) {
			return false
		}
	}
	return name != ""
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

// isControl: the characters TOML strings hold only escaped (tab aside).
func isControl(r rune) bool {
	return (r < 0x20 && r != '\t') || r == 0x7f
}

// escapeBasic writes value as the content of a "…" or """…""" string.
func escapeBasic(value string) string {
	var b strings.Builder
	for _, r := range value {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case isControl(r):
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
