package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/trust"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// optionKeys and ruleKeys are the keys of [[inputs.xdp_drop]] and of
// [[inputs.xdp_drop.rule]]: the toml tags of the plugin's fields, in their
// order, so they cannot drift.
var (
	optionKeys = tomlKeys(reflect.TypeFor[xdp_drop.XDPDrop]())
	ruleKeys   = tomlKeys(reflect.TypeFor[xdp_drop.Rule]())
)

// tableKeys are the keys of the sub-tables of [[inputs.xdp_drop]], by
// their dotted path under it.
var tableKeys = map[string][]string{
	"bans":          tomlKeys(reflect.TypeFor[xdp_drop.BansConfig]()),
	"bans.crowdsec": tomlKeys(reflect.TypeFor[xdp_drop.CrowdSecConfig]()),
	"bans.detect":   tomlKeys(reflect.TypeFor[xdp_drop.DetectConfig]()),
	"flowspec":      tomlKeys(reflect.TypeFor[xdp_drop.FlowSpecConfig]()),
	"flowspec.peer": tomlKeys(reflect.TypeFor[xdp_drop.FlowSpecPeer]()),
}

// options and ruleOptions list the keys of [[inputs.xdp_drop]] and of a
// rule, for error messages.
var (
	options     = strings.Join(optionKeys, ", ")
	ruleOptions = strings.Join(ruleKeys, ", ")
)

func tomlKeys(t reflect.Type) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if key != "" && key != "-" {
			keys = append(keys, key)
		}
	}
	return keys
}

// loadConfig reads the plugin's config file strictly: unlike the shim's own
// loader it refuses unknown keys, other plugins and repeated sections, so a
// typo never silently falls back to a default. Unless trustUID is
// noTrustCheck, the file must pass the trust check for that user; a refusal
// is an *untrustedError. Unknown keys are all reported, one a line, each
// with its line in the file.
func loadConfig(path string, trustUID int) (*xdp_drop.XDPDrop, error) {
	plugin, conf, err := readConfig(path, trustUID)
	if plugin != nil && err != nil {
		var lines []string
		for _, e := range xdp_drop.Errors(err) {
			lines = append(lines, conf.locate(e))
		}
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	return plugin, err
}

// readConfig is loadConfig that tells where the keys stand (conf). Unknown
// keys do not stop it: it returns the plugin as decoded and the error
// joins them, each an *xdp_drop.OptionError for conf.locate. Any other
// error is alone, names the file, and comes without a plugin.
func readConfig(path string, trustUID int) (*xdp_drop.XDPDrop, *loadedConfig, error) {
	conf := &loadedConfig{path: path}
	raw, err := readConfigFile(path, trustUID)
	if err != nil {
		return nil, conf, err
	}
	var empty []emptyVar
	doc, err := expandEnvNoting(string(raw), &empty)
	if err != nil {
		return nil, conf, fmt.Errorf("config %s: %w", path, err)
	}
	var decoded struct {
		Inputs map[string][]toml.Primitive `toml:"inputs"`
	}
	md, err := toml.Decode(doc, &decoded)
	if err != nil {
		return nil, conf, fmt.Errorf("config %s: %w", path, oneLine(err))
	}
	for name := range decoded.Inputs {
		if name != "xdp_drop" {
			return nil, conf, fmt.Errorf("config %s: [[inputs.%s]] is not served by this binary; it runs only [[inputs.xdp_drop]]", path, name)
		}
	}
	sections := decoded.Inputs["xdp_drop"]
	switch len(sections) {
	case 0:
		return nil, conf, fmt.Errorf("config %s: no [[inputs.xdp_drop]] section; see sample.conf", path)
	case 1:
	default:
		return nil, conf, fmt.Errorf("config %s: %d [[inputs.xdp_drop]] sections; one per process: list all interfaces in one, or run one execd per config", path, len(sections))
	}
	conf.lines = parseConfigLines(doc)
	plugin := xdp_drop.New()
	if err := md.PrimitiveDecode(sections[0], plugin); err != nil {
		return nil, conf, fmt.Errorf("config %s: %w", path, decodeError(md, sections[0], err))
	}
	noteEmptyKey(plugin, conf.lines, empty)
	errs, refused := checkKeyCase(md, plugin.Rules, sections[0])
	for _, key := range md.Undecoded() {
		if under(key, refused) {
			continue // the keys of an unknown table go with it
		}
		refused = append(refused, key)
		errs = append(errs, unknownKey(md, plugin.Rules, sections[0], key))
	}
	return plugin, conf, errors.Join(errs...)
}

// unknownKey refuses a key that is no option, with the keys to use.
func unknownKey(md toml.MetaData, rules []xdp_drop.Rule, section toml.Primitive, key toml.Key) error {
	if len(key) < 2 || key[0] != "inputs" || key[1] != "xdp_drop" {
		// Outside the section, where no line of it tells where.
		return fmt.Errorf("unknown section or key %s: this file holds only one [[inputs.xdp_drop]] section (agent and output settings belong in Telegraf's config)", quote.Value(key.String()))
	}
	if len(key) == 4 && key[2] == "rule" {
		n, label := ruleWithKey(rules, md, section, key[3])
		return &xdp_drop.OptionError{Rule: n, Key: key[3], Err: fmt.Errorf("%s: unknown key %s; a rule takes %s", label, quote.Value(key[3]), ruleOptions)}
	}
	if table, ok := subTable(key); ok {
		return &xdp_drop.OptionError{Key: tableKey(md, key), Err: fmt.Errorf("unknown option %s; [inputs.xdp_drop.%s] takes %s", quote.Value(key.String()), table, strings.Join(tableKeys[table], ", "))}
	}
	return &xdp_drop.OptionError{Key: key[2], Err: fmt.Errorf("unknown option %s; [[inputs.xdp_drop]] takes %s", quote.Value(key.String()), options)}
}

// decodeError names the rule a type error is in, by position and name, as
// the decoder names only the line and the key.
func decodeError(md toml.MetaData, section toml.Primitive, err error) error {
	var raw struct {
		Rule []toml.Primitive `toml:"rule"`
	}
	if md.PrimitiveDecode(section, &raw) != nil {
		return oneLine(err)
	}
	for i, p := range raw.Rule {
		var r xdp_drop.Rule
		rerr := md.PrimitiveDecode(p, &r)
		if rerr == nil {
			continue
		}
		label := fmt.Sprintf("rule %d", i+1)
		var named struct {
			Name any `toml:"name"`
		}
		if md.PrimitiveDecode(p, &named) == nil {
			if name, ok := named.Name.(string); ok {
				label += " (" + quote.Value(name) + ")"
			}
		}
		m := typeErrorText.FindStringSubmatch(oneLine(rerr).Error())
		if m == nil {
			return fmt.Errorf("%s: %w", label, oneLine(rerr))
		}
		return fmt.Errorf("%s: %s: line %s: %s%s", label, m[2], m[1], m[3], typeHint(m[2], m[3]))
	}
	return oneLine(err)
}

// typeErrorText parses the decoder's type error: the line, the key (its last
// part) and the cause.
var typeErrorText = regexp.MustCompile(`^toml: line (\d+) \(last key "(?:.*\.)?([a-z_]+)"\): (.*)$`)

// typeHint says how to write a rule's key, from the type the decoder
// wanted (the cause's last word).
func typeHint(key, cause string) string {
	rule := reflect.TypeFor[xdp_drop.Rule]()
	var list bool
	for i := range rule.NumField() {
		if k, _, _ := strings.Cut(rule.Field(i).Tag.Get("toml"), ","); k == key {
			list = rule.Field(i).Type.Kind() == reflect.Slice
		}
	}
	switch {
	case strings.HasSuffix(cause, "type slice"):
		return fmt.Sprintf("; write a list in brackets, e.g. %s = [...]", key)
	case strings.HasSuffix(cause, "type string") && list:
		return fmt.Sprintf(`; write each entry in quotes, e.g. %s = ["..."]`, key)
	case strings.HasSuffix(cause, "type string"):
		return fmt.Sprintf(`; write a string in quotes, e.g. %s = "..."`, key)
	}
	return ""
}

// checkKeyCase refuses each key that is an option only when case is
// ignored: the decoder matches keys to fields case-insensitively, so "DROP"
// would silently set drop, while Telegraf and the documentation spell it
// "drop". refused holds the keys refused, those under them being refused
// with them.
func checkKeyCase(md toml.MetaData, rules []xdp_drop.Rule, section toml.Primitive) (errs []error, refused []toml.Key) {
	const why = "keys are case-sensitive"
	refuse := func(key toml.Key, err error) {
		if !under(key, refused) {
			refused = append(refused, key)
			errs = append(errs, err)
		}
	}
	for _, key := range md.Keys() {
		if key[0] != "inputs" && strings.EqualFold(key[0], "inputs") {
			refuse(key, fmt.Errorf("unknown section or key %s (%s); did you mean [[inputs.xdp_drop]]?", quote.Value(key.String()), why))
			continue
		}
		if len(key) < 3 || key[0] != "inputs" || key[1] != "xdp_drop" {
			continue
		}
		if want, ok := foldMatch(optionKeys, key[2]); ok {
			refuse(key[:3], &xdp_drop.OptionError{Key: key[2], Err: fmt.Errorf("unknown option %s (%s); did you mean %s?", quote.Value(key[:3].String()), why, quote.Value(want))})
			continue
		}
		if table, ok := subTable(key); ok {
			if want, ok := foldMatch(tableKeys[table], key[len(key)-1]); ok {
				refuse(key, &xdp_drop.OptionError{Key: tableKey(md, key), Err: fmt.Errorf("unknown option %s (%s); did you mean %s?", quote.Value(key.String()), why, quote.Value(want))})
			}
			continue
		}
		if len(key) == 4 && key[2] == "rule" {
			if want, ok := foldMatch(ruleKeys, key[3]); ok {
				n, label := ruleWithKey(rules, md, section, key[3])
				refuse(key, &xdp_drop.OptionError{Rule: n, Key: key[3], Err: fmt.Errorf("%s: unknown key %s (%s); did you mean %s?", label, quote.Value(key[3]), why, quote.Value(want))})
			}
		}
	}
	return errs, refused
}

// subTable is the sub-table of [[inputs.xdp_drop]] (a key of tableKeys)
// that holds key, a key of [[inputs.xdp_drop]]'s tree.
func subTable(key toml.Key) (string, bool) {
	if len(key) < 4 {
		return "", false
	}
	table := strings.Join(key[2:len(key)-1], ".")
	_, ok := tableKeys[table]
	return table, ok
}

// tableKey is the option key of a sub-table's key, by its dotted path;
// a FlowSpec peer's names the peer that holds it, "flowspec.peer[2].port",
// for its line: the peer tables come in md's keys in their order, each
// before its own keys. (Decoding the peers here would mark their keys
// decoded, and hide the unknown ones.)
func tableKey(md toml.MetaData, key toml.Key) string {
	path := strings.Join(key[2:], ".")
	if len(key) != 5 || key[2] != "flowspec" || key[3] != "peer" {
		return path
	}
	n := 0
	for _, k := range md.Keys() {
		switch {
		case slices.Equal(k, key[:4]):
			n++
		case slices.Equal(k, key) && n > 0:
			return fmt.Sprintf("flowspec.peer[%d].%s", n, key[4])
		}
	}
	return path
}

// under reports whether key is one of keys or under one of them.
func under(key toml.Key, keys []toml.Key) bool {
	return slices.ContainsFunc(keys, func(k toml.Key) bool { return len(k) <= len(key) && slices.Equal(k, key[:len(k)]) })
}

// foldMatch finds the key that equals k except in case; ok is false when k
// is spelled right, or matches no key at all.
func foldMatch(keys []string, k string) (string, bool) {
	for _, want := range keys {
		if want != k && strings.EqualFold(want, k) {
			return want, true
		}
	}
	return "", false
}

// ruleWithKey finds the first rule that holds key: its position from 1 and
// its label, by name where it has one; 0 and "rule" when none does.
func ruleWithKey(rules []xdp_drop.Rule, md toml.MetaData, section toml.Primitive, key string) (int, string) {
	var raw struct {
		Rule []map[string]any `toml:"rule"`
	}
	if err := md.PrimitiveDecode(section, &raw); err == nil {
		for i, r := range raw.Rule {
			if _, ok := r[key]; !ok {
				continue
			}
			if i < len(rules) && rules[i].Name != "" {
				return i + 1, "rule " + quote.Value(rules[i].Name)
			}
			return i + 1, fmt.Sprintf("rule %d", i+1)
		}
	}
	return 0, "rule"
}

// maxConfigSize bounds what is read of the config file: the file is one
// short section, and a device such as /dev/zero must not fill the memory.
const maxConfigSize = 1 << 20

// noTrustCheck, as loadConfig's trustUID, reads the config without the
// trust check.
const noTrustCheck = trust.NoCheck

// readConfigFile reads a regular file of at most maxConfigSize bytes
// through one descriptor: the bytes returned are those of the file that was
// checked. Unless trustUID is noTrustCheck, the file and the way to it must
// pass the trust check for that user. It opens without blocking, so a
// FIFO is refused instead of waited on.
func readConfigFile(path string, trustUID int) ([]byte, error) {
	f, err := openConfigFile(path, trustUID)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(raw) > maxConfigSize {
		return nil, fmt.Errorf("config %s: larger than 1 MiB; the plugin's config is one [[inputs.xdp_drop]] section of a few lines: check that -config names the right file", path)
	}
	return raw, nil
}

func openConfigFile(path string, trustUID int) (*os.File, error) {
	f, _, err := trust.OpenRegular(path, trustUID, "config")
	var notRegular *trust.NotRegularError
	switch {
	case errors.As(err, &notRegular):
		return nil, notRegularFile(notRegular.Path, notRegular.Mode)
	case err != nil && trustUID == noTrustCheck:
		return nil, fmt.Errorf("config: %w", err)
	}
	return f, err
}

func notRegularFile(path string, mode fs.FileMode) error {
	return fmt.Errorf("config %s: not a regular file (%s); pass the path of the plugin's TOML file, e.g. -config /etc/telegraf-xdp-drop/xdp_drop.conf", path, fileKind(mode))
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string { return trust.FileKind(m) }

// oneLine keeps the first line of a TOML error: the position and the cause.
func oneLine(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return errors.New(pe.Error())
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return errors.New(msg)
}

// unwrapInit drops the shim's "failed to init input: " prefix from an Init error.
func unwrapInit(err error) error {
	if inner := errors.Unwrap(err); inner != nil {
		return inner
	}
	return err
}

// noteEmptyKey tells the plugin which variables left the bouncer's
// api_key empty, for its error to name them.
func noteEmptyKey(plugin *xdp_drop.XDPDrop, lines *configLines, empty []emptyVar) {
	if plugin.Bans == nil || plugin.Bans.CrowdSec == nil || plugin.Bans.CrowdSec.APIKey != "" || lines == nil {
		return
	}
	line := lines.options["bans.crowdsec.api_key"]
	for _, v := range empty {
		if line > 0 && v.line == line {
			plugin.Bans.CrowdSec.APIKeyVars = append(plugin.Bans.CrowdSec.APIKeyVars, xdp_drop.EnvVar{Name: v.name, Set: v.set})
		}
	}
}
