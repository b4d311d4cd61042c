//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConfigNotARegularFile: a device, a FIFO, a directory or an oversized
// file as -config ends the binary at once with exit code 1 and one error
// line that names the file and the problem, instead of reading forever or
// filling the memory.
func TestConfigNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.conf")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	big := filepath.Join(dir, "big.conf")
	// A valid config padded with comments past 1 MiB.
	text := "[[inputs.xdp_drop]]\n  interfaces = [\"a0\"]\n  drop = [\"all\"]\n" + strings.Repeat("# padding padding padding padding padding padding padding padding\n", 17000)
	require.NoError(t, os.WriteFile(big, []byte(text), 0o600))

	cases := []struct{ name, path, want string }{
		{"device", "/dev/zero", "E! config /dev/zero: not a regular file (a character device); pass the path of the plugin's TOML file"},
		{"fifo", fifo, "E! config " + fifo + ": not a regular file (a FIFO)"},
		{"directory", dir, "E! config " + dir + ": not a regular file (a directory)"},
		{"over 1 MiB", big, "E! config " + big + ": larger than 1 MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Only a hang or an unbounded read comes near this bound.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "-config", c.path, "-poll_interval_disabled").CombinedOutput()
			require.NoError(t, ctx.Err(), "the binary did not exit; output: %s", out)
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "exit status: %v; output: %s", err, out)
			require.Equal(t, 1, exit.ExitCode())
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Len(t, lines, 1, "one line: %s", out)
			require.True(t, strings.HasPrefix(lines[0], c.want), "got %q", lines[0])
		})
	}
}

// TestLongRuleNameShortLogLine: the binary given a rule whose name is
// 900 kB long exits with one short error line naming the rule's position,
// the start of the name and its length.
func TestLongRuleNameShortLogLine(t *testing.T) {
	conf := writeConfig(t, "[[inputs.xdp_drop]]\n  interfaces = [\"a0\"]\n  [[inputs.xdp_drop.rule]]\n    name = \""+strings.Repeat("a", 900_000)+
		"\"\n    action = \"drop\"\n    protocol = [\"udp\"]\n")
	out, err := exec.Command(binary, "-config", conf, "-poll_interval_disabled").CombinedOutput()
	require.Error(t, err)
	require.Less(t, len(out), 1024, "%.300s", out)
	require.Regexp(t, `^E! config .*: rule 1: name "a{128}"…\(900000 bytes\) is 900000 characters long; use \[a-z0-9_.-\], at most 64 characters\n$`, string(out))
}
