package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDetectConfigLocated: a refused value of [bans.detect] is placed on
// its line; an unknown key there lists the table's keys.
func TestDetectConfigLocated(t *testing.T) {
	conf := writeConfig(t, `[[inputs.xdp_drop]]
  interfaces = ["eth1"]
  drop = ["udp"]
  sample_rate = 100
  sample_actions = ["drop", "pass"]
  [inputs.xdp_drop.bans]
    [inputs.xdp_drop.bans.detect]
      pps = 50000
      for = "500ms"
`)
	plugin, c, err := readConfig(conf, noTrustCheck)
	require.NoError(t, err)
	var lines []string
	for _, e := range errorsOf(plugin.Init()) {
		lines = append(lines, c.locate(e))
	}
	require.Equal(t, []string{
		"config " + conf + `:9: bans.detect.for = "500ms" is out of range; use whole seconds from 1s to 1h0m0s (default "2s"): the detector rates sources every second`,
	}, lines)

	conf = writeConfig(t, `[[inputs.xdp_drop]]
  interfaces = ["eth1"]
  drop = ["udp"]
  [inputs.xdp_drop.bans]
    [inputs.xdp_drop.bans.detect]
      pps = 50000
      ban_for = "10m"
`)
	_, err = loadConfig(conf, noTrustCheck)
	require.EqualError(t, err, "config "+conf+`:7: unknown option "inputs.xdp_drop.bans.detect.ban_for"; [inputs.xdp_drop.bans.detect] takes pps, bytes_per_second, for, protocols, duration, max_duration, dry_run, crowdsec_push, crowdsec_login, crowdsec_password_file, unverified_action, push_unverified, max_bans_per_minute, max_pushes_per_minute`)
}
