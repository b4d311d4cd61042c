//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

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

// TestRenderReadOnly: an observed interface gets a line under the title
// naming whose counters these are, and its link line says read-only; a
// long interface name and large ids still fit the screen. The title says
// Ctrl-C detaches only while the view attached an interface itself.
func TestRenderReadOnly(t *testing.T) {
	snap := xdp_drop.Snapshot{Links: []xdp_drop.Link{
		{Interface: "eth1", Mode: "native", Attached: true, ProgramID: 42, Observer: "the instance of pid 4242"},
		{Interface: "enp129s0f1np1", Mode: "generic", Attached: true, ProgramID: 4294967295, Observer: "the instance of pid 4194304, 4194303"},
		{Interface: "eth2", Mode: "native", Attached: true, ProgramID: 43},
	}}
	screen := render(snap, newHistory(), time.Second, time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC), time.Second)
	lines := strings.Split(screen, "\n")
	require.Equal(t, "read-only eth1: counters of the instance of pid 4242, program id 42", lines[1])
	require.Equal(t, "read-only enp129s0f1np1: counters of the instance of pid 4194304, 4194303, p...", lines[2])
	require.True(t, strings.HasPrefix(lines[4], "INTERFACE "), "the table follows: %q", lines[4])
	require.Contains(t, lines, "link eth1: read-only, native mode, program id 42 (not attached here)")
	require.Contains(t, lines, "link eth2: attached, native mode, program id 43")
	require.NotContains(t, screen, "read-only eth2")
	require.Equal(t, "xdp_drop watch  2026-12-01 15:00:00  every 1s  (Ctrl-C detaches and quits)", lines[0], "eth2 is attached here")
	require.Equal(t, "Ctrl-C leaves what it observes attached, its counters running", lines[3])
	for _, line := range lines {
		require.LessOrEqual(t, len(line), width, "line wider than %d columns: %q", width, line)
	}

	// Every interface observed: the view only observes, and its title
	// does not promise to detach.
	snap.Links = snap.Links[:2]
	screen = render(snap, newHistory(), time.Second, time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC), time.Second)
	lines = strings.Split(screen, "\n")
	require.Equal(t, "xdp_drop watch  2026-12-01 15:00:00  every 1s  (only observes; Ctrl-C quits)", lines[0])
	require.Equal(t, "Ctrl-C leaves what it observes attached, its counters running", lines[3])
	require.NotContains(t, screen, "detaches")
	requireFits(t, screen)
}
