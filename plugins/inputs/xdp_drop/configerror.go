package xdp_drop

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// OptionError is the refusal of one option's value. Key is the option, or
// the key of a rule; Rule is that rule's position from 1, 0 for an option of
// [[inputs.xdp_drop]]. It reads as the refusal alone, which names the
// option (and the rule): Key and Rule let the binary say on which line of
// its config the value stands.
type OptionError struct {
	Rule int
	Key  string
	Err  error
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// optionError makes err the refusal of key; nil stays nil, and an error that
// names its key already keeps it.
func optionError(key string, err error) error {
	var named *OptionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &named):
		return err
	}
	return &OptionError{Key: key, Err: err}
}

// inRule prefixes err with the rule's label and makes it the refusal of key
// in rule n, or of the key err names already; without key, of the key of a
// rule its text starts with, if any.
func inRule(n int, label, key string, err error) error {
	var named *OptionError
	if errors.As(err, &named) {
		key, err = named.Key, named.Err
	}
	if key == "" {
		key = leadingKey(reflect.TypeFor[Rule](), err)
	}
	return &OptionError{Rule: n, Key: key, Err: fmt.Errorf("%s: %w", label, err)}
}

// Errors lists the errors err holds: those it joins (errors.Join), each
// alone, in order; err alone otherwise.
func Errors(err error) []error {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range joined.Unwrap() {
		out = append(out, Errors(e)...)
	}
	return out
}

// leadingOption is the option of [[inputs.xdp_drop]] an error's text starts
// with ("capture_snaplen = 20 is …"), or "" when it starts with none.
func leadingOption(err error) string { return leadingKey(reflect.TypeFor[XDPDrop](), err) }

// leadingKey is the key of t (a toml tag) an error's text starts with, or "".
func leadingKey(t reflect.Type, err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	end := strings.IndexFunc(msg, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') })
	if end < 0 {
		end = len(msg)
	}
	if slices.ContainsFunc(reflect.VisibleFields(t), func(f reflect.StructField) bool {
		key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		return key == msg[:end]
	}) {
		return msg[:end]
	}
	return ""
}
