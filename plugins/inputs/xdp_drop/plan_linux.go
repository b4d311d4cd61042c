//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"

	"github.com/influxdata/telegraf/filter"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// planInterfaces lists, in the configured namespace, the interfaces named
// exactly (present or not) and those each pattern matches now, less
// interface_exclude and loopback, as discover would, and the patterns that
// match none.
func (l *links) planInterfaces() ([]PlannedInterface, []string, error) {
	var list []net.Interface
	err := l.ns.do(func() error {
		var err error
		list, err = net.Interfaces()
		if err != nil {
			return fmt.Errorf("list interfaces: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	present := make(map[string]bool, len(list))
	for _, dev := range list {
		present[dev.Name] = true
	}
	var out []PlannedInterface
	named := map[string]bool{}
	for _, entry := range l.opts.interfaces {
		if !isPattern(entry) {
			name := literalName(entry)
			named[name] = true
			out = append(out, PlannedInterface{Name: name, Present: present[name]})
		}
	}
	var unmatched []string
	for _, entry := range l.opts.interfaces {
		if !isPattern(entry) {
			continue
		}
		pattern, err := filter.Compile([]string{entry})
		if err != nil {
			return nil, nil, fmt.Errorf("interfaces: %s: %w", quote.Value(entry), err)
		}
		matched := false
		for _, dev := range list {
			if dev.Flags&net.FlagLoopback != 0 || !pattern.Match(dev.Name) || !l.selector.Match(dev.Name) {
				continue
			}
			matched = true
			if !named[dev.Name] {
				named[dev.Name] = true
				out = append(out, PlannedInterface{Name: dev.Name, Pattern: entry, Present: true})
			}
		}
		if !matched {
			unmatched = append(unmatched, entry)
		}
	}
	return out, unmatched, nil
}

// planPins says, reading only, what pin_path would meet at start and what
// a start then does: attach without pins, or not attach.
func (l *links) planPins() error {
	if l.opts.pinPath == "" {
		return nil
	}
	err := bpf.CheckPinPath(l.opts.pinPath)
	var unpinnable *bpf.UnpinnableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unpinnable):
		return fmt.Errorf("%w; the interfaces would be attached without pins", advise(err))
	}
	return fmt.Errorf("%w; the interfaces would not be attached", advise(err))
}
