package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// options lists the keys of [[inputs.xdp_drop]], for error messages.
const options = "interfaces, interface_exclude, namespace, mode, drop, dry_run, replace, per_cpu, per_queue, pin_path, keep_attached"

// loadConfig reads the plugin's config file strictly: unlike the shim's own
// loader it refuses unknown keys, other plugins and repeated sections, so a
// typo never silently falls back to a default.
func loadConfig(path string) (*xdp_drop.XDPDrop, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var conf struct {
		Inputs map[string][]toml.Primitive `toml:"inputs"`
	}
	md, err := toml.Decode(expandEnv(string(raw)), &conf)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, oneLine(err))
	}
	for name := range conf.Inputs {
		if name != "xdp_drop" {
			return nil, fmt.Errorf("config %s: [[inputs.%s]] is not served by this binary; it runs only [[inputs.xdp_drop]]", path, name)
		}
	}
	sections := conf.Inputs["xdp_drop"]
	switch len(sections) {
	case 0:
		return nil, fmt.Errorf("config %s: no [[inputs.xdp_drop]] section; see sample.conf", path)
	case 1:
	default:
		return nil, fmt.Errorf("config %s: %d [[inputs.xdp_drop]] sections; one per process: list all interfaces in one, or run one execd per config", path, len(sections))
	}
	plugin := &xdp_drop.XDPDrop{}
	if err := md.PrimitiveDecode(sections[0], plugin); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, oneLine(err))
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		key := undecoded[0]
		if len(key) < 2 || key[0] != "inputs" || key[1] != "xdp_drop" {
			return nil, fmt.Errorf("config %s: unknown section or key %q: this file holds only one [[inputs.xdp_drop]] section (agent and output settings belong in Telegraf's config)", path, key.String())
		}
		return nil, fmt.Errorf("config %s: unknown option %q; [[inputs.xdp_drop]] takes %s", path, key.String(), options)
	}
	return plugin, nil
}

var envEscaper = strings.NewReplacer(`"`, `\"`, `\`, `\\`)

// expandEnv substitutes $VAR and ${VAR} as the shim's loader does.
func expandEnv(s string) string {
	return os.Expand(s, func(k string) string { return envEscaper.Replace(os.Getenv(k)) })
}

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
