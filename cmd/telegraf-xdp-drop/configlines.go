package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/influxdata/toml"
	"github.com/influxdata/toml/ast"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// loadedConfig is the config file read, with where its keys stand, so that
// an error about a value says on which line it is.
type loadedConfig struct {
	path  string
	lines *configLines // nil when not known
}

// configLines are the lines of the [[inputs.xdp_drop]] section, of its
// options and of each rule and its keys.
type configLines struct {
	section int
	options map[string]int
	rules   []ruleLines
}

type ruleLines struct {
	table int
	keys  map[string]int
}

// parseConfigLines finds the lines of the section's keys in doc with
// Telegraf's own TOML parser, whose syntax tree keeps them; nil when it
// finds no single section (the strict decoder has said why by then).
func parseConfigLines(doc string) *configLines {
	root, err := toml.Parse([]byte(doc))
	if err != nil {
		return nil
	}
	inputs, ok := root.Fields["inputs"].(*ast.Table)
	if !ok {
		return nil
	}
	sections, ok := inputs.Fields["xdp_drop"].([]*ast.Table)
	if !ok || len(sections) != 1 {
		return nil
	}
	text := []rune(doc)
	lineOf := func(v any) int {
		var kv *ast.KeyValue
		switch t := v.(type) {
		case *ast.Table:
			return t.Line
		case []*ast.Table:
			return t[0].Line
		case *ast.KeyValue:
			kv = t
		default:
			return 0
		}
		// The line the value starts on, which is the key's: the parser's
		// own Line is where a multi-line value ends.
		line := 1
		for _, r := range text[:min(kv.Value.Pos(), len(text))] {
			if r == '\n' {
				line++
			}
		}
		return line
	}
	s := sections[0]
	c := &configLines{section: s.Line, options: map[string]int{}}
	for k, v := range s.Fields {
		if line := lineOf(v); line > 0 {
			c.options[k] = line
		}
	}
	// The sub-tables' keys by their dotted path: "bans.crowdsec.url".
	var sub func(prefix string, t *ast.Table)
	sub = func(prefix string, t *ast.Table) {
		for k, v := range t.Fields {
			if line := lineOf(v); line > 0 {
				c.options[prefix+k] = line
			}
			if inner, ok := v.(*ast.Table); ok {
				sub(prefix+k+".", inner)
			}
		}
	}
	if bans, ok := s.Fields["bans"].(*ast.Table); ok {
		sub("bans.", bans)
	}
	if fs, ok := s.Fields["flowspec"].(*ast.Table); ok {
		sub("flowspec.", fs)
		// Each peer by its position, as errors name it: "flowspec.peer[2].port".
		peers, _ := fs.Fields["peer"].([]*ast.Table)
		for i, p := range peers {
			c.options[fmt.Sprintf("flowspec.peer[%d]", i+1)] = p.Line
			sub(fmt.Sprintf("flowspec.peer[%d].", i+1), p)
		}
	}
	rules, _ := s.Fields["rule"].([]*ast.Table)
	for _, r := range rules {
		rl := ruleLines{table: r.Line, keys: map[string]int{}}
		for k, v := range r.Fields {
			if line := lineOf(v); line > 0 {
				rl.keys[k] = line
			}
		}
		c.rules = append(c.rules, rl)
	}
	return c
}

// line is where key stands: an option (rule 0) or the key of rule n (from
// 1); the rule's, or the section's, first line when the key is not written
// there; 0 when unknown.
func (c *configLines) line(rule int, key string) int {
	switch {
	case c == nil:
		return 0
	case rule == 0 && c.options[key] > 0:
		return c.options[key]
	case rule == 0 && strings.Contains(key, "."):
		// A key of a sub-table not written: the table's line.
		return c.line(0, key[:strings.LastIndexByte(key, '.')])
	case rule == 0:
		return c.section
	case rule > len(c.rules):
		return c.section
	case c.rules[rule-1].keys[key] > 0:
		return c.rules[rule-1].keys[key]
	}
	return c.rules[rule-1].table
}

// locate writes one error of the config as "config FILE:LINE: …", with the
// line of the option it names (see xdp_drop.OptionError) when known.
func (c *loadedConfig) locate(err error) string {
	if line := c.lineOf(err); line > 0 {
		return fmt.Sprintf("config %s:%d: %v", c.path, line, err)
	}
	return fmt.Sprintf("config %s: %v", c.path, err)
}

// report logs every error err holds (xdp_drop.Errors), one a line, located,
// in the order of their lines.
func (c *loadedConfig) report(log *levelWriter, err error) {
	errs := xdp_drop.Errors(err)
	slices.SortStableFunc(errs, func(a, b error) int { return c.lineOf(a) - c.lineOf(b) })
	for _, e := range errs {
		log.Errorf("%s", c.locate(e))
	}
}

// lineOf is the line of the option err names, 0 when not known.
func (c *loadedConfig) lineOf(err error) int {
	var opt *xdp_drop.OptionError
	if errors.As(err, &opt) {
		return c.lines.line(opt.Rule, opt.Key)
	}
	return 0
}
