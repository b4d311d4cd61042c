//go:build linux

package xdp_drop

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// addScenarios bans value with one decision per scenario, as an agent's
// brute force does (the sshd collection fires ssh-bf and ssh-bf_user-enum),
// each later one ending later (its alert came later), and returns their
// ids in the order made.
func addScenarios(t *testing.T, l *lapi.LAPI, value string, scenarios ...string) []int64 {
	t.Helper()
	for i, s := range scenarios {
		l.Cscli("decisions", "add", "--ip", value, "--reason", s, "--duration", fmt.Sprintf("%dh", 4+i))
	}
	var alerts []struct {
		Decisions []struct {
			ID    int64  `json:"id"`
			Value string `json:"value"`
		} `json:"decisions"`
	}
	require.NoError(t, json.Unmarshal([]byte(l.Cscli("alerts", "list", "--ip", value, "-o", "json")), &alerts))
	var ids []int64
	for _, a := range alerts {
		for _, d := range a.Decisions {
			if d.Value == value {
				ids = append(ids, d.ID)
			}
		}
	}
	slices.Sort(ids)
	require.Len(t, ids, len(scenarios))
	return ids
}

// TestBansDeleteLiftsTheValue runs the plugin against a real LAPI with two
// decisions on each of two addresses. The stream sends one of each value's
// two as new, and a deletion under the id of the other: "cscli decisions
// delete --ip" lifts the ban at the next pull. Deleting by id the one sent
// as new, while the other stands, keeps the ban (the stream lists no
// deletion: the value is still banned); deleting the other then lifts it.
func TestBansDeleteLiftsTheValue(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	addScenarios(t, l, "198.51.100.7", "crowdsecurity/ssh-bf", "crowdsecurity/ssh-bf_user-enum")
	ids := addScenarios(t, l, "198.51.100.8", "crowdsecurity/ssh-bf", "crowdsecurity/ssh-bf_user-enum")
	ns := testns.New(t)
	p := banPlugin(l, key, nil)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 2 })
	sendBanFlows(t, ns, banFlow{"198.51.100.7", 3, 0}, banFlow{"198.51.100.8", 3, 0})

	l.DeleteDecision("198.51.100.7")
	f := waitBans(t, ns, p, "the deleted address lifted", func(f map[string]any) bool { return field(f, FieldActive) == 1 })
	require.Equal(t, int64(1), field(f, FieldRemoved))
	sendBanFlows(t, ns, banFlow{"198.51.100.7", 3, 3}, banFlow{"198.51.100.8", 3, 0})

	// The later decision (the one the stream sent) deleted, the earlier stands.
	l.DeleteDecisionID(ids[1])
	synced := field(f, FieldSynced)
	waitBans(t, ns, p, "two pulls after the delete by id", func(f map[string]any) bool { return field(f, FieldSynced) >= synced+2 })
	f, _ = banPoint(t, ns, p)
	require.Equal(t, int64(1), field(f, FieldActive), "one of the value's decisions stands: still banned")
	sendBanFlows(t, ns, banFlow{"198.51.100.8", 3, 0})

	l.DeleteDecisionID(ids[0])
	f = waitBans(t, ns, p, "the value's last decision deleted", func(f map[string]any) bool { return field(f, FieldActive) == 0 })
	require.Equal(t, int64(2), field(f, FieldRemoved))
	require.Equal(t, int64(2), field(f, FieldAdded))
	sendBanFlows(t, ns, banFlow{"198.51.100.8", 3, 3})
}
