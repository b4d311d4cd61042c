//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// banPointOf is the xdp_drop_ban point of iface among ms, nil if none.
func banPointOf(ms []telegraf.Metric, iface string) telegraf.Metric {
	for _, m := range ms {
		if m.Name() == "xdp_drop_ban" && m.Tags()["interface"] == iface {
			return m
		}
	}
	return nil
}

// TestBinaryBans runs the binary with [bans] fed by a real LAPI, the key
// from the environment (${NAME} in the config): the binary runs in this
// namespace, where the LAPI listens, and attaches in the test's
// (namespace option). A banned source's frames are dropped and counted on
// xdp_drop_ban; the key appears nowhere in what the binary writes.
func TestBinaryBans(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-binary")
	l.AddDecision("203.0.113.0/24", time.Hour)
	t.Setenv("XDP_DROP_TEST_BOUNCER_KEY", key)
	ns := testns.New(t)
	p := startHere(t, ns, fmt.Sprintf(`[[inputs.xdp_drop]]
  namespace = %q
  interfaces = [%q]
  drop = ["gre"]
  [inputs.xdp_drop.bans]
    [inputs.xdp_drop.bans.crowdsec]
      url = %q
      api_key = "${XDP_DROP_TEST_BOUNCER_KEY}"
      interval = "300ms"
`, ns.Name, testns.Dev, l.URL()))

	var ban telegraf.Metric
	for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ban = banPointOf(p.gather(t, testns.Dev), testns.Dev)
		require.NotNil(t, ban, "an xdp_drop_ban point at every gather; stderr: %s", p.stderr)
		if active, _ := ban.GetField("active"); active == int64(1) {
			break
		}
	}
	require.Equal(t, map[string]string{"interface": testns.Dev, "origin": "crowdsec", "action": "drop"}, ban.Tags())
	active, _ := ban.GetField("active")
	require.Equal(t, int64(1), active, "the LAPI's ban in force; stderr: %s", p.stderr)

	frame := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 1, 2)),
		netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("10.9.0.1")))
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, 7) }))
	for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ban = banPointOf(p.gather(t, testns.Dev), testns.Dev)
		if packets, _ := ban.GetField("packets"); packets == int64(7) {
			break
		}
	}
	packets, _ := ban.GetField("packets")
	bytes, _ := ban.GetField("bytes")
	require.Equal(t, []any{int64(7), int64(7 * len(frame))}, []any{packets, bytes})

	// The LAPI records the binary's version from its User-Agent, as cscli bouncers list shows it.
	var bouncers []struct{ Name, Type, Version string }
	require.NoError(t, json.Unmarshal([]byte(l.Cscli("bouncers", "list", "-o", "json")), &bouncers))
	require.Len(t, bouncers, 1)
	require.Equal(t, "xdp-drop", bouncers[0].Type)
	require.NotContains(t, []string{"", "unknown"}, bouncers[0].Version, "the binary's version, not unknown")
	t.Logf("the LAPI records the bouncer as %s/%s", bouncers[0].Type, bouncers[0].Version)
	require.NoError(t, p.stdin.Close())
	require.NoError(t, p.wait(t))
	require.NotContains(t, p.stderr.String(), key, "the key is never logged")
	require.False(t, strings.Contains(p.stderr.String(), "E! "), "no error logged: %s", p.stderr)
}
