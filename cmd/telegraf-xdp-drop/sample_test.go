//go:build linux

package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSampleConfigAttachesNothing runs the binary on sample.conf exactly as
// shipped (and packaged as the default config): it attaches to nothing,
// reports nothing and says in the log what to edit.
func TestSampleConfigAttachesNothing(t *testing.T) {
	cmd := exec.Command(binary, "-config", "../../sample.conf", "-poll_interval_disabled")
	cmd.Stdin = strings.NewReader("\n\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	require.Empty(t, stdout.String(), "no points")
	require.Contains(t, stderr.String(), `W! interfaces = []: nothing is attached and nothing is reported; list the interfaces to attach to in the plugin's config, e.g. interfaces = ["eth1"]`)
	require.NotContains(t, stderr.String(), "E! ")
}
