package xdp_drop

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeTelegrafFormat holds the README to what Telegraf's own doc tools
// (tools/readme_linter, tools/readme_config_includer) would write or demand,
// read from the Telegraf module this plugin builds against.
func TestReadmeTelegrafFormat(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)

	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/influxdata/telegraf").Output()
	require.NoError(t, err, "locate the Telegraf module")
	include, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "docs", "includes", "plugin_config.md"))
	require.NoError(t, err)
	section := "## Global configuration options <!-- @/docs/includes/plugin_config.md -->\n\n" + string(include) + "\n## "
	require.Contains(t, string(readme), section, "the Global configuration options section must be Telegraf's include text, verbatim")

	// readme_linter's metaVersion: the version the plugin was introduced in.
	star := regexp.MustCompile(`(?m)^⭐ Telegraf v\d+\.\d+\.\d+(?:\s+<!-- .* -->\s*)?$`)
	require.Regexp(t, star, string(readme), "the ⭐ line must be 'Telegraf vX.Y.Z'")

	// The include links ../../../docs/CONFIGURATION.md#plugins; it must resolve here.
	cfg, err := os.ReadFile("../../../docs/CONFIGURATION.md")
	require.NoError(t, err)
	require.Contains(t, string(cfg), "\n## Plugins\n")
}
