//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// TestLinkTextFallback: the watch view tells a generic attachment that
// mode = "auto" fell back to from one configured as generic.
func TestLinkTextFallback(t *testing.T) {
	link := func(mode string, fallback bool) xdp_drop.Link {
		return xdp_drop.Link{Interface: "eth1", Mode: mode, Attached: true, ProgramID: 7, Fallback: fallback}
	}
	require.Equal(t, "link eth1: attached, generic mode (auto fell back), program id 7", linkText(link("generic", true)))
	require.Equal(t, "link eth1: attached, generic mode, program id 7", linkText(link("generic", false)))
	require.Equal(t, "link eth1: attached, native mode, program id 7", linkText(link("native", false)))
}
