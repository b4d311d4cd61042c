//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestPrefixFileUnderFileCapabilities: as the service user, with the file
// capabilities, a prefix file that others may write is refused at start as
// the config would be, and nothing is attached; once only its owner may
// write it, its prefixes are in force.
func TestPrefixFileUnderFileCapabilities(t *testing.T) {
	ns := testns.New(t)
	dir, err := os.MkdirTemp("", "xdp-drop-cap")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "telegraf-xdp-drop")
	raw, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, raw, 0o755))
	require.NoError(t, exec.Command("setcap", setcapCaps, bin).Run())
	list := filepath.Join(dir, "drop.txt")
	require.NoError(t, os.WriteFile(list, []byte("; Spamhaus DROP\n192.0.2.0/24 ; SBL1\n2001:db8::/32 ; SBL2\n"), 0o666))
	require.NoError(t, os.Chmod(list, 0o666))
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = [%q]
  handover_timeout = "0s"
  [[inputs.xdp_drop.rule]]
    name = "spamhaus-drop"
    action = "drop"
    src_prefix_file = [%q]
`, testns.Dev, list)), 0o644))
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	asNobody := func() *exec.Cmd {
		return ns.Exec("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-config", conf, "-poll_interval_disabled")
	}

	combined, err := asNobody().CombinedOutput()
	require.Error(t, err, "%s", combined)
	require.Contains(t, string(combined), `rule "spamhaus-drop": src_prefix_file: `+list+" is writable by its group and all users (mode 0666), who could then choose which traffic is dropped; run: chmod go-w "+list)
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "nothing attached")

	require.NoError(t, os.Chmod(list, 0o644))
	out, errOut := gatherOnce(t, asNobody())
	require.Contains(t, out, "attached=true", "stderr: %s", errOut)
	require.Contains(t, out, "xdp_drop_rule,action=drop,interface="+testns.Dev+",rule=spamhaus-drop ")
	require.Contains(t, out, "prefixes=2i")
}
