//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// TestExpected: the drop list is read as the plugin reads it, and a round
// of the mix is predicted with the plugin's tags: drop for what the list
// selects, would_drop for it in a dry run, pass for the rest.
func TestExpected(t *testing.T) {
	policy, err := parsePolicy("udp, ICMPv6,47")
	require.NoError(t, err)
	require.Equal(t, []uint8{17, 58, 47}, policy.Protocols)

	actions := func(r Report) map[string]string {
		m := map[string]string{}
		for _, s := range r.Series {
			m[s.Family+"/"+s.Protocol] = s.Action
		}
		return m
	}
	r := expected(traffic.Mix(), 2, policy)
	require.Equal(t, uint64(2*traffic.Total(traffic.Mix())), r.Frames)
	require.Equal(t, map[string]string{
		"ipv4/tcp": "pass", "ipv4/udp": "drop", "ipv4/icmp": "pass", "ipv4/gre": "drop",
		"ipv6/tcp": "pass", "ipv6/udp": "drop", "ipv6/ipv6-icmp": "drop", "l2/arp": "pass", "l2/other": "pass",
	}, actions(r))
	for _, s := range r.Series {
		if s.Family == "ipv4" && s.Protocol == "udp" {
			require.Equal(t, uint64(2*62), s.Packets) // 50 plain and 12 tagged frames a round
		}
	}

	policy.DryRun = true
	dry := actions(expected(traffic.Mix(), 1, policy))
	require.Equal(t, "would_drop", dry["ipv4/udp"])
	require.Equal(t, "would_drop", dry["ipv6/ipv6-icmp"])
	require.Equal(t, "pass", dry["ipv4/tcp"])

	_, err = parsePolicy("udp,icmpv7")
	require.ErrorContains(t, err, `drop: "icmpv7" is not an IP protocol name`)
}
