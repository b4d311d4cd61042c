//go:build linux

package xdp_drop

import (
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestBansImportedList: a list imported the usual way ('cscli decisions
// import -i', no --scope) gives its ranges scope Ip; the plugin bans each
// as the range it names and says so in one line for the whole pull. (The
// LAPI refuses an import with a value of scope Ip that is neither an
// address nor a prefix: TestBansIPScopeGarbage sends those.)
func TestBansImportedList(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.ImportList([]lapi.Decision{
		{Value: "203.0.113.0/24", Duration: time.Hour},
		{Value: "198.51.100.7", Duration: time.Hour},
		{Value: "2001:db8:bad::/48", Duration: time.Hour},
		{Value: "192.0.2.0/25", Duration: time.Hour},
	})
	ns := testns.New(t)
	p := banPlugin(l, key, nil)
	log := &testutil.CaptureLogger{}
	p.Log = log
	require.Empty(t, startPlugin(t, ns, p).Errors)
	f := waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	require.Equal(t, int64(4), field(f, FieldActive))
	require.Equal(t, int64(0), field(f, FieldRefused))
	sendBanFlows(t, ns,
		banFlow{"203.0.113.5", 3, 0},     // inside the /24 the list names
		banFlow{"203.0.113.0", 2, 0},     // its first address
		banFlow{"198.51.100.7", 2, 0},    // an address of the list
		banFlow{"2001:db8:bad::9", 2, 0}, // inside the IPv6 range
		banFlow{"192.0.2.100", 2, 0},     // inside the /25
		banFlow{"192.0.2.200", 2, 2},     // beside it
		banFlow{"203.0.114.1", 2, 2},     // beside the /24
	)

	// A range imported while running, then another pull: said once all the same.
	l.ImportList([]lapi.Decision{{Value: "198.51.100.128/25", Duration: time.Hour}})
	waitBans(t, ns, p, "the range imported while running", func(f map[string]any) bool { return field(f, FieldActive) == 5 })
	sendBanFlows(t, ns, banFlow{"198.51.100.200", 2, 0})
	var said []string
	for _, m := range log.Messages() {
		if strings.Contains(m.Text, "scope Ip hold a range") {
			said = append(said, m.Text)
		}
	}
	require.Len(t, said, 1, "one line for them all: %v", said)
	require.Contains(t, said[0], "3 decisions of scope Ip hold a range")
}

// TestBansIPScopeGarbage: a value of scope Ip that is neither an address
// nor a prefix is refused and counted, beside a range of scope Ip banned.
func TestBansIPScopeGarbage(t *testing.T) {
	lapi := newFakeLAPI(t, streamJSON(
		decisionJSON(1, "Ip", "203.0.113.0/24"),
		decisionJSON(2, "Ip", "not-an-address"),
		decisionJSON(3, "Ip", "192.0.2.0/33"),
		decisionJSON(4, "Ip", "10.0.0.0/8/9"),
		decisionJSON(5, "Ip", "198.51.100.1-198.51.100.9"),
	))
	ns := testns.New(t)
	p := banPluginAt(lapi.server.URL+"/", testBouncerKey, nil)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	f := waitBans(t, ns, p, "the answer in force", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	require.Equal(t, int64(1), field(f, FieldActive))
	require.Equal(t, int64(4), field(f, FieldRefused))
	sendBanFlows(t, ns, banFlow{"203.0.113.9", 2, 0}, banFlow{"198.51.100.1", 2, 2})
}
