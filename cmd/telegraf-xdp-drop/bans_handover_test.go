//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// bansConfig drops GRE, with bans fed by the LAPI at url (the key from
// XDP_DROP_TEST_BOUNCER_KEY) and, with rule, a rule that passes UDP to
// port 53.
func bansConfig(ns *testns.NS, url string, rule bool) string {
	c := fmt.Sprintf(`[[inputs.xdp_drop]]
  namespace = %q
  interfaces = [%q]
  drop = ["gre", "udp"]
`, ns.Name, testns.Dev)
	if rule {
		c += `  [[inputs.xdp_drop.rule]]
    name = "dns"
    action = "pass"
    protocol = ["udp"]
    dst_port = [53]
`
	}
	return c + fmt.Sprintf(`  [inputs.xdp_drop.bans]
    [inputs.xdp_drop.bans.crowdsec]
      url = %q
      api_key = "${XDP_DROP_TEST_BOUNCER_KEY}"
      interval = "300ms"
`, url)
}

// fieldOf is m's integer field, -1 when m is nil or has none.
func fieldOf(m telegraf.Metric, field string) int64 {
	if m == nil {
		return -1
	}
	v, ok := m.GetField(field)
	if !ok {
		return -1
	}
	return v.(int64)
}

// gatherUntil gathers p until ok holds for its points, or testns.Hang.
func gatherUntil(t *testing.T, p *proc, ok func([]telegraf.Metric) bool) []telegraf.Metric {
	t.Helper()
	var ms []telegraf.Metric
	for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ms = p.gather(t, testns.Dev); ok(ms) {
			break
		}
	}
	return ms
}

// TestHandoverBansContinue: an instance with [bans] (a real LAPI's ban in
// force) stops and a successor with the identical config takes it over:
// every counter continues, xdp_drop, xdp_drop_rule and xdp_drop_ban, exact
// for the frames sent through the veth before and after, and the log says
// so, never that they restart.
func TestHandoverBansContinue(t *testing.T) {
	l := lapi.Start(t)
	t.Setenv("XDP_DROP_TEST_BOUNCER_KEY", l.AddBouncer("xdp-drop-handover"))
	l.AddDecision("203.0.113.0/24", time.Hour)
	banned := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 1, 2)),
		netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("10.9.0.1")))
	dns := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 53)),
		netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("10.9.0.1")))
	other := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 9)),
		netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("10.9.0.1")))
	for _, rule := range []bool{false, true} {
		t.Run(fmt.Sprintf("rule=%v", rule), func(t *testing.T) {
			ns := testns.New(t)
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf")
			config := bansConfig(ns, l.URL(), rule)
			gen, err := txgen.New()
			require.NoError(t, err)
			defer gen.Close()
			send := func(frame []byte, n int) {
				require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) }))
			}
			// want is what every gather must show once the frames sent so far are counted.
			want := func(bans, dnsPassed, dropped int64) func([]telegraf.Metric) bool {
				return func(ms []telegraf.Metric) bool {
					cs, _ := counts(ms)
					okRule := !rule || ruleCount(ms, "dns") == dnsPassed
					return fieldOf(banPointOf(ms, testns.Dev), "packets") == bans && okRule &&
						cs[key{testns.Dev, "ipv4", "udp", "drop"}][0] == bans+dropped
				}
			}
			check := func(ms []telegraf.Metric, bans, dnsPassed, dropped int64, who string, p *proc) {
				t.Helper()
				cs, _ := counts(ms)
				ban := banPointOf(ms, testns.Dev)
				require.Equal(t, bans, fieldOf(ban, "packets"), "%s: xdp_drop_ban packets; stderr: %s", who, p.stderr)
				require.Equal(t, bans*int64(len(banned)), fieldOf(ban, "bytes"), "%s: xdp_drop_ban bytes", who)
				require.Equal(t, bans+dropped, cs[key{testns.Dev, "ipv4", "udp", "drop"}][0], "%s: UDP dropped (bans and policy)", who)
				if rule {
					require.Equal(t, dnsPassed, ruleCount(ms, "dns"), "%s: xdp_drop_rule dns", who)
					require.Equal(t, dnsPassed, cs[key{testns.Dev, "ipv4", "udp", "pass"}][0], "%s: UDP passed by the rule", who)
				}
			}

			a := startHereAt(t, ns, conf, config)
			gatherUntil(t, a, func(ms []telegraf.Metric) bool { return fieldOf(banPointOf(ms, testns.Dev), "active") == 1 })
			send(banned, 7)
			send(other, 4)
			var dnsA int64
			if rule {
				send(dns, 5)
				dnsA = 5
			}
			check(gatherUntil(t, a, want(7, dnsA, 4)), 7, dnsA, 4, "A", a)
			idA := waitAttached(t, ns, testns.Dev)
			// Frames after A's last gather, before the handover: B must count them.
			send(banned, 3)
			send(other, 2)

			require.NoError(t, a.stdin.Close())
			b := startHereAt(t, ns, conf, config)
			require.NoError(t, a.wait(t), "A's exit status; stderr: %s", a.stderr)
			waitLog(t, b, fmt.Sprintf("I! interface %q: taken over in place, program id %d; counters continue", testns.Dev, idA))
			send(banned, 2)
			if rule {
				send(dns, 1)
			}
			dnsB := dnsA
			if rule {
				dnsB++
			}
			check(gatherUntil(t, b, want(12, dnsB, 6)), 12, dnsB, 6, "B", b)
			require.Equal(t, idA, waitAttached(t, ns, testns.Dev), "the same program goes on")
			require.NotContains(t, b.stderr.String(), "counters restart")
			require.NoError(t, b.stdin.Close())
			require.NoError(t, b.wait(t))
		})
	}
}
