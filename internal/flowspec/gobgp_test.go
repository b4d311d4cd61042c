//go:build linux

package flowspec

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

const ntpRule = "match destination 192.0.2.10/32 protocol udp source-port ==123 packet-length >=400 then discard"

func ntpFlowRule() bpf.FlowRule {
	r := bpf.FlowRule{
		Dst:          &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("192.0.2.10/32")},
		Proto:        bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 17}},
		SrcPort:      bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 123}},
		PacketLength: bpf.FlowComponent{{Op: bpf.FlowGT | bpf.FlowEQ, Value: 400}},
		Action:       bpf.FlowDrop,
	}
	r.ID = ruleID(ntpText)
	return r
}

const ntpText = "destination 192.0.2.10/32 protocol ==17 source-port ==123 packet-length >=400 then discard"

// TestGobgpdAnnounceWithdraw: gobgpd's NTP rule arrives as the exact
// FlowRule within 1 s, and its withdrawal empties the set within 1 s.
func TestGobgpdAnnounceWithdraw(t *testing.T) {
	g := startGobgpd(t, "127.0.0.2", true, gobgpNeighbor{addr: "127.0.0.1", as: 65001, passive: true})
	r, a := startReceiver(t, g, nil)
	waitUp(t, r, 15*time.Second, g)

	g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "add"}, fields(ntpRule)...)...)
	rules := a.waitRules(t, time.Second, 1)
	require.Equal(t, []bpf.FlowRule{ntpFlowRule()}, rules)
	st := r.Rules()
	require.Len(t, st, 1)
	require.Equal(t, ntpText, st[0].Text)
	require.Equal(t, "", st[0].Refused)
	require.Equal(t, netip.MustParseAddr("127.0.0.2"), st[0].Peer)
	ps := r.Peers()
	require.Len(t, ps, 1)
	require.Equal(t, "established", ps[0].State)
	require.Equal(t, 1, ps[0].Received)
	require.Equal(t, 1, ps[0].Accepted)
	require.False(t, ps[0].LastUpdate.IsZero())

	g.cli(append([]string{"global", "rib", "-a", "ipv4-flowspec", "del"}, fields(ntpRule)...)...)
	a.waitRules(t, time.Second, 0)
	require.Empty(t, r.Rules())
}
