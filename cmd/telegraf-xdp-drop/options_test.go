package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnknownOptionListsEveryOption: an unknown key is refused with the
// list of options taken from the plugin's fields, and that list is exactly
// the options sample.conf documents, in the same order.
func TestUnknownOptionListsEveryOption(t *testing.T) {
	sample, err := os.ReadFile("../../sample.conf")
	require.NoError(t, err)
	var documented []string
	// Options, and the tables of rules (shown once however many examples).
	for _, m := range regexp.MustCompile(`(?m)^  (?:# )?(?:([a-z_]+) = |\[\[inputs\.xdp_drop\.([a-z_]+)\]\])`).FindAllStringSubmatch(string(sample), -1) {
		key := m[1] + m[2]
		if !slices.Contains(documented, key) {
			documented = append(documented, key)
		}
	}
	require.Equal(t, strings.Join(documented, ", "), options)

	conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[[inputs.xdp_drop]]\n  interfaces = [\"eth1\"]\n  dropp = [\"all\"]\n"), 0o600))
	_, err = loadConfig(conf)
	require.EqualError(t, err, "config "+conf+`: unknown option "inputs.xdp_drop.dropp"; [[inputs.xdp_drop]] takes `+strings.Join(documented, ", "))
}
