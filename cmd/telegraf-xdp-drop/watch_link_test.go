//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLinkTextFallback: the watch view tells a generic attachment that
// mode = "auto" fell back to from one configured as generic.
func TestLinkTextFallback(t *testing.T) {
	link := func(mode string, fallback bool) point {
		return point{name: "xdp_drop_link", tags: map[string]string{"interface": "eth1", "mode": mode},
			fields: map[string]any{"attached": true, "program_id": int64(7), "fallback": fallback}}
	}
	require.Equal(t, "link eth1: attached, generic mode (auto fell back), program id 7", linkText(link("generic", true)))
	require.Equal(t, "link eth1: attached, generic mode, program id 7", linkText(link("generic", false)))
	require.Equal(t, "link eth1: attached, native mode, program id 7", linkText(link("native", false)))
}
