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
	for _, m := range []string{MeasurementCounters, MeasurementRule, MeasurementLink, MeasurementTop, MeasurementBan, MeasurementBanEvent} {
		require.Contains(t, table, "\n| `"+m+"` |", "README.md's metrics table lacks %s", m)
	}
}
