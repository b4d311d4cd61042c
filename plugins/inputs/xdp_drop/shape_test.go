package xdp_drop

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxRuntimeFields bounds the fields of XDPDrop that no config option
// fills: the plugin wires owners (links, sampling, prefix lists, …) and
// keeps their state in them, not beside its options: Log, Run, the lock,
// and one owner per part (prefix lists, links, sampling, bans with their
// options, FlowSpec).
const maxRuntimeFields = 9

// maxFileLines bounds a hand-written file of the plugin: one type and its
// life, or one idea, per file.
const maxFileLines = 400

// TestPluginWiresOwners: XDPDrop holds its options and a few owners, no
// more runtime state than maxRuntimeFields.
func TestPluginWiresOwners(t *testing.T) {
	var runtime []string
	typ := reflect.TypeOf(XDPDrop{})
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Tag.Get("toml") == "" || f.Tag.Get("toml") == "-" {
			runtime = append(runtime, f.Name)
		}
	}
	require.LessOrEqual(t, len(runtime), maxRuntimeFields, "XDPDrop's fields of runtime state: %v; give new state an owner type", runtime)
}

// TestPluginFilesStaySmall: no hand-written file of the plugin grows past
// maxFileLines; split it by idea.
func TestPluginFilesStaySmall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var long []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		text, err := os.ReadFile(name)
		require.NoError(t, err)
		if n := bytes.Count(text, []byte("\n")); n > maxFileLines {
			long = append(long, name)
		}
	}
	require.Empty(t, long, "plugin files over %d lines", maxFileLines)
}
