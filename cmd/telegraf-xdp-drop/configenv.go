package main

import (
	"os"
	"strings"
)

var envEscaper = strings.NewReplacer(`"`, `\"`, `\`, `\\`)

// expandEnv substitutes $VAR and ${VAR} as the shim's loader does.
func expandEnv(s string) (string, error) {
	return os.Expand(s, func(k string) string { return envEscaper.Replace(os.Getenv(k)) }), nil
}
