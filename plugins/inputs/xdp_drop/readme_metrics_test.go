package xdp_drop

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTopReadmeListsEveryMeasurement: the repository README's metrics
// table has a row for every measurement the plugin emits.
func TestTopReadmeListsEveryMeasurement(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "\n## Metrics\n")
	require.True(t, ok, "README.md has a Metrics section")
	table, _, _ = strings.Cut(table, "\n## ")
	for _, m := range []string{MeasurementCounters, MeasurementRule, MeasurementLink, MeasurementTop, MeasurementBan, MeasurementBanEvent, MeasurementFlowSpec, MeasurementFlowSpecPeer} {
		require.Contains(t, table, "\n| `"+m+"` |", "README.md's metrics table lacks %s", m)
	}
}

// TestPluginReadmeListsEveryMeasurement: the plugin README's metrics
// section has an item for every measurement, and names every FlowSpec
// refusal reason (each a field).
func TestPluginReadmeListsEveryMeasurement(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Metrics\n")
	require.True(t, ok, "README.md has a Metrics section")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, m := range []string{MeasurementCounters, MeasurementRule, MeasurementLink, MeasurementTop, MeasurementBan, MeasurementBanEvent, MeasurementFlowSpec, MeasurementFlowSpecPeer} {
		require.Contains(t, section, "\n- "+m+" (", "the plugin README's metrics lack %s", m)
	}
	for _, reason := range FlowRefusals {
		require.Contains(t, section, "`"+reason+"`")
	}
}
