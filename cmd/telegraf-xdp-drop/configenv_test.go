package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigExpandsEnv: $VAR and ${VAR} in the config file take their values
// from the environment, as in Telegraf's own config; quotes and backslashes
// in a value stay part of the string, and an unset variable is empty.
func TestConfigExpandsEnv(t *testing.T) {
	t.Setenv("XDP_TEST_IFACE", "eth1")
	t.Setenv("XDP_TEST_ODD", `we"ird\name`)
	t.Setenv("XDP_TEST_PROTO", "udp")
	t.Setenv("XDP_TEST_PIN", "/sys/fs/bpf/xdp_drop")
	os.Unsetenv("XDP_TEST_UNSET")
	path := filepath.Join(t.TempDir(), "xdp_drop.conf")
	require.NoError(t, os.WriteFile(path, []byte(`[[inputs.xdp_drop]]
  interfaces = ["$XDP_TEST_IFACE", "${XDP_TEST_ODD}", "x${XDP_TEST_UNSET}y"]
  drop = ["${XDP_TEST_PROTO}", "$XDP_TEST_PROTO"]
  pin_path = "$XDP_TEST_PIN"
`), 0o600))
	plugin, err := loadConfig(path, noTrustCheck)
	require.NoError(t, err)
	require.Equal(t, []string{"eth1", `we"ird\name`, "xy"}, plugin.Interfaces)
	require.Equal(t, []any{"udp", "udp"}, plugin.Drop)
	require.Equal(t, "/sys/fs/bpf/xdp_drop", plugin.PinPath)
}
