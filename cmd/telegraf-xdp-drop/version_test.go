//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionFlag builds the binary the way make build does and checks that
// -version prints what it was given and the Go and cilium/ebpf versions.
func TestVersionFlag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "telegraf-xdp-drop")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=1.2.3 -X main.commit=abc123", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "-version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 4, "%s", out)
	require.Equal(t, "telegraf-xdp-drop 1.2.3", lines[0])
	require.Equal(t, "commit abc123", lines[1])
	require.Regexp(t, `^go go1\.\d+`, lines[2])
	require.Regexp(t, `^cilium/ebpf v\d+\.\d+\.\d+`, lines[3])
}
