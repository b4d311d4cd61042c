package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBansConfigLocated: a refused value of the bans tables is placed on
// its line, as a key of the section is; an unknown key there lists the
// table's keys, and one spelt in another case is refused.
func TestBansConfigLocated(t *testing.T) {
	conf := writeConfig(t, `[[inputs.xdp_drop]]
  interfaces = ["eth1"]
  drop = ["udp"]
  [inputs.xdp_drop.bans]
    max = -5
    [inputs.xdp_drop.bans.crowdsec]
      url = "ftp://lapi:21/"
      api_key = "k3y"
`)
	plugin, c, err := readConfig(conf, noTrustCheck)
	require.NoError(t, err)
	var lines []string
	for _, e := range errorsOf(plugin.Init()) {
		lines = append(lines, c.locate(e))
	}
	require.Equal(t, []string{
		"config " + conf + ":5: bans.max = -5 is out of range; bans in force at once, per family, are 1-1000000 (default 100000)",
		"config " + conf + `:7: bans.crowdsec.url = "ftp://lapi:21/": the scheme must be http or https; write the LAPI's address, such as "http://127.0.0.1:8080/"`,
	}, lines)

	conf = writeConfig(t, `[[inputs.xdp_drop]]
  interfaces = ["eth1"]
  drop = ["udp"]
  [inputs.xdp_drop.bans]
    allow = ["192.0.2.0/24"]
    [inputs.xdp_drop.bans.crowdsec]
      URL = "http://lapi:8080/"
      api_key = "k3y"
`)
	_, err = loadConfig(conf, noTrustCheck)
	require.EqualError(t, err, strings.Join([]string{
		"config " + conf + `:7: unknown option "inputs.xdp_drop.bans.crowdsec.URL" (keys are case-sensitive); did you mean "url"?`,
		"config " + conf + `:5: unknown option "inputs.xdp_drop.bans.allow"; [inputs.xdp_drop.bans] takes allow_prefix, allow_prefix_file, max, dry_run, crowdsec, detect`,
	}, "\n"))
}

func errorsOf(err error) []error {
	if err == nil {
		return nil
	}
	var out []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, errorsOf(e)...)
		}
		return out
	}
	return []error{err}
}

// TestBansKeyVariableNamed: an api_key that an unset or empty variable
// left empty names the variable, and how it stands; the hint names the
// bouncer as the docs do (xdp-drop-<host>). A view (-status, -watch)
// needs no key at all.
func TestBansKeyVariableNamed(t *testing.T) {
	conf := writeConfig(t, `[[inputs.xdp_drop]]
  interfaces = ["eth1"]
  drop = ["udp"]
  [inputs.xdp_drop.bans]
    [inputs.xdp_drop.bans.crowdsec]
      url = "http://127.0.0.1:8080/"
      api_key = "${XDP_DROP_TEST_NO_SUCH_KEY}"
`)
	hint := `; set it in the environment of Telegraf's service to the key "cscli bouncers add xdp-drop-<host>" printed, or set api_key_file = "/etc/telegraf-xdp-drop/crowdsec.key" instead`
	for _, c := range []struct {
		set   bool
		state string
	}{{false, "unset"}, {true, "set but empty"}} {
		if c.set {
			t.Setenv("XDP_DROP_TEST_NO_SUCH_KEY", "")
		}
		plugin, lc, err := readConfig(conf, noTrustCheck)
		require.NoError(t, err)
		errs := errorsOf(plugin.Init())
		require.Len(t, errs, 1)
		require.Equal(t, "config "+conf+":7: bans.crowdsec.api_key is empty: the environment variable XDP_DROP_TEST_NO_SUCH_KEY is "+c.state+hint, lc.locate(errs[0]))

		view, _, err := readConfig(conf, noTrustCheck)
		require.NoError(t, err)
		view.Run.Observe, view.Run.ReadOnly = true, true
		require.NoError(t, view.Init(), "a view reads no key")
	}
	plugin, _, err := readConfig(writeConfig(t, strings.Replace(mustReadFile(t, conf), `api_key = "${XDP_DROP_TEST_NO_SUCH_KEY}"`, "", 1)), noTrustCheck)
	require.NoError(t, err)
	require.ErrorContains(t, plugin.Init(), `create a key with "cscli bouncers add xdp-drop-<host>" on the LAPI's host`)
}

func mustReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
