package crowdsec_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
)

// TestLAPIStreamOneDecisionPerValue pins what a real LAPI (1.4) sends for
// a value of two decisions (two scenarios, the later ending later): the
// stream keeps one per scope, value and type, the longest as new, but a
// deletion of both under the id of whichever its query found first; a
// deletion of one while the other stands is not sent at all.
func TestLAPIStreamOneDecisionPerValue(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	for _, v := range []string{"198.51.100.7", "198.51.100.8"} {
		l.Cscli("decisions", "add", "--ip", v, "--reason", "crowdsecurity/ssh-bf", "--duration", "4h")
		l.Cscli("decisions", "add", "--ip", v, "--reason", "crowdsecurity/ssh-bf_user-enum", "--duration", "5h")
	}
	c := lapiClient(t, l, key)
	ctx := context.Background()
	d, err := c.Pull(ctx, true)
	require.NoError(t, err)
	got := byValue(t, d.New)
	require.Equal(t, int64(2), got["198.51.100.7"].ID, "the longest of the value's two")
	require.Equal(t, int64(4), got["198.51.100.8"].ID)

	l.DeleteDecision("198.51.100.7")
	l.DeleteDecisionID(4) // the one sent; 3 stands
	time.Sleep(100 * time.Millisecond)
	d, err = c.Pull(ctx, false)
	require.NoError(t, err)
	require.Empty(t, d.New)
	require.Len(t, d.Deleted, 1, "198.51.100.8 still has a decision: no deletion of it")
	require.Equal(t, "198.51.100.7", d.Deleted[0].Value)
	require.Equal(t, int64(1), d.Deleted[0].ID, "deleted under another id than the one sent as new")
}
