//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
)

// TestCheckBans: -check shows [bans] (the feed, its key file, the allow
// list, detection and its dry run) and counts the ban maps in its kernel
// memory, without asking the LAPI; -check-lapi asks it once and says
// whether it is reachable and takes the key.
func TestCheckBans(t *testing.T) {
	l := lapi.Start(t)
	proxy, requests := countingProxy(t, l.URL())
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "crowdsec.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(l.AddBouncer("xdp-drop-check")+"\n"), 0o600))
	allowFile := filepath.Join(dir, "allow.txt")
	require.NoError(t, os.WriteFile(allowFile, []byte("198.51.100.0/24\n2001:db8::/32\n"), 0o600))
	config := func(url, key string) string {
		return writeConfig(t, fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = []
  drop = []
  sample_rate = 100
  sample_actions = ["drop", "pass"]
  [inputs.xdp_drop.bans]
    allow_prefix = ["192.0.2.0/24"]
    allow_prefix_file = [%q]
    [inputs.xdp_drop.bans.crowdsec]
      url = %q
      api_key_file = %q
    [inputs.xdp_drop.bans.detect]
      pps = 50000
      duration = "10m"
`, allowFile, url, key))
	}
	conf := config(proxy.URL, keyFile)
	stdout, stderr, code := runSplit(t, exec.Command(binary, "-config", conf, "-check"))
	require.Equal(t, 0, code, "stderr: %s", stderr)
	mem := bpf.BanMapMemory(0)
	for _, want := range []string{
		"bans: at most 100,000 in force per family, checked before the rules\n",
		fmt.Sprintf("  feed crowdsec: %q, key from %q (not contacted; -check-lapi asks it once)\n", proxy.URL, keyFile),
		"  allow list: 2 IPv4, 1 IPv6 prefixes, 1 file\n",
		"  detect: pps 50,000 for 2s, ban 10m0s (up to 24h0m0s), dry run (bans.detect.dry_run, true by default): logs and counts, bans nothing; crowdsec_push false\n",
		"  detect evidence: verified bans drop; unverified_action limit, push_unverified false; at most 10 bans and 10 pushes a minute\n",
		"kernel memory, at most: no rule maps, ban maps " + bytesText(mem) + ";",
		"; " + bytesText(mem) + " for the 0 interfaces present now\n",
	} {
		require.Contains(t, stdout, want)
	}
	require.Zero(t, requests.Load(), "-check alone asks no LAPI")

	// The bans' dry run and the plugin's make the detection one, whatever
	// its own dry_run says, and it pushes nothing.
	pw := filepath.Join(dir, "machine.pw")
	require.NoError(t, os.WriteFile(pw, []byte("edge-pass-word\n"), 0o600))
	for _, dry := range []struct{ plugin, bans, why string }{
		{"", "\n    dry_run = true", "bans.dry_run = true"},
		{"\n  dry_run = true", "", "the plugin's dry_run = true"},
	} {
		actions := `["drop", "pass"]`
		if dry.plugin != "" {
			actions = `["would_drop", "pass"]`
		}
		conf := writeConfig(t, fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = []
  drop = []%s
  sample_rate = 100
  sample_actions = %s
  [inputs.xdp_drop.bans]%s
    [inputs.xdp_drop.bans.crowdsec]
      url = %q
      api_key_file = %q
    [inputs.xdp_drop.bans.detect]
      pps = 50000
      dry_run = false
      crowdsec_push = true
      crowdsec_password_file = %q
`, dry.plugin, actions, dry.bans, proxy.URL, keyFile, pw))
		stdout, stderr, code := runSplit(t, exec.Command(binary, "-config", conf, "-check"))
		require.Equal(t, 0, code, "stderr: %s", stderr)
		require.Contains(t, stdout, "  detect: pps 50,000 for 2s, ban 10m0s (up to 24h0m0s), dry run ("+dry.why+"): logs and counts, bans nothing; crowdsec_push true (a dry run pushes nothing)\n")
	}
	require.Zero(t, requests.Load(), "-check alone asks no LAPI")

	stdout, stderr, code = runSplit(t, exec.Command(binary, "-config", conf, "-check", "-check-lapi"))
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Contains(t, stdout, fmt.Sprintf("lapi %q: reachable, the bouncer key is accepted\n", proxy.URL))
	require.Equal(t, int64(1), requests.Load(), "one request")

	bad := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("notakey\n"), 0o600))
	stdout, _, code = runSplit(t, exec.Command(binary, "-config", config(l.URL(), bad), "-check", "-check-lapi"))
	require.Equal(t, 1, code)
	require.Contains(t, stdout, fmt.Sprintf("lapi %q: reachable, but the bouncer key is refused (HTTP 403, unauthorized)", l.URL()))
	require.NotContains(t, stdout, "notakey")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := fmt.Sprintf("http://%s/", ln.Addr())
	ln.Close()
	start := time.Now()
	stdout, _, code = runSplit(t, exec.Command(binary, "-config", config(closed, keyFile), "-check", "-check-lapi"))
	require.Equal(t, 1, code)
	require.Contains(t, stdout, fmt.Sprintf("lapi %q: unreachable: ", closed))
	require.Contains(t, stdout, "connection refused")
	require.Less(t, time.Since(start), lapiProbeTimeout)
}
