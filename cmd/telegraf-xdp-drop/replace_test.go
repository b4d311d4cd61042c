//go:build linux

package main

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestTwoReplaceInstancesNeverFight runs two binaries with replace = true on
// one veth for 10 s, both gathering all along: the second refuses to take
// the interface from the first, naming its program and process, so the
// interface keeps one program id. When the first stops, the second attaches:
// two program ids in all.
func TestTwoReplaceInstancesNeverFight(t *testing.T) {
	ns := testns.New(t)
	// handover_timeout = "0s": the first detaches when it stops, and the
	// second attaches its own program rather than taking the link over.
	config := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  replace = true\n  handover_timeout = \"0s\"\n", testns.Dev)
	first := start(t, ns, config)
	firstID := waitAttached(t, ns, testns.Dev)
	first.gather(t, testns.Dev)
	second := start(t, ns, config)

	ids := map[uint32]bool{}
	watch := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			first.gather(t, testns.Dev)
			second.gather(t, testns.Dev)
			for i := 0; i < 10; i++ {
				id, err := ns.XDPProgramID(testns.Dev)
				require.NoError(t, err)
				ids[id] = true
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	watch(10 * time.Second)
	require.Equal(t, map[uint32]bool{firstID: true}, ids, "the first instance keeps the interface")
	want := fmt.Sprintf("E! Error in plugin: interface %q: XDP program id %d (xdp_drop) belongs to a running instance: process %d (telegraf-xdp-dr) holds its link id ",
		testns.Dev, firstID, first.cmd.Process.Pid)
	waitLog(t, second, want)
	require.Contains(t, second.stderr.String(), "an interface is never taken from a running xdp_drop, even with replace = true, so it is left alone: stop that instance, or give each instance interfaces and a pin_path of its own")
	require.Equal(t, 1, strings.Count(second.stderr.String(), "E! "), "reported once: %s", second.stderr)
	require.NotContains(t, first.stderr.String(), "E! ")
	require.NotContains(t, first.stderr.String(), "W! ")

	require.NoError(t, first.stdin.Close())
	require.NoError(t, first.wait(t))
	var secondID uint32
	for deadline := time.Now().Add(testns.Hang); secondID == 0 || secondID == firstID; {
		require.True(t, time.Now().Before(deadline), "the second instance never attached; stderr: %s", second.stderr)
		second.gather(t, testns.Dev)
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		secondID = id
	}
	ids[secondID] = true
	var all []uint32
	for id := range ids {
		if id != 0 {
			all = append(all, id)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	require.Len(t, all, 2, "program ids seen: %v", all)
	t.Logf("program ids over the run: %v", all)
}
