//go:build linux

package xdp_drop

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// exampleRules are docs/rules.md's reflection-shedding rules, and one that
// matches nothing.
func exampleRules() []Rule {
	return []Rule{
		{Name: "mgmt", Action: "pass", SrcPrefix: []string{"192.0.2.0/24", "2001:db8:1::/48"}},
		{Name: "memcached-reflection", Action: "drop", Protocol: []any{"udp"}, SrcPort: []any{int64(11211)}},
		{Name: "dns-to-resolver", Action: "pass", Protocol: []any{"udp", "tcp"}, DstPrefix: []string{"198.51.100.53/32"}, DstPort: []any{int64(53)}},
		{Name: "never", Action: "drop", Protocol: []any{"gre"}, SrcPrefix: []string{"198.18.0.0/15"}},
	}
}

// ruleFlow is a flow with the rule that decides it ("" for none) and its action.
type ruleFlow struct {
	traffic.Flow
	rule string
	drop bool
}

func ipFrame(src, dst string, proto uint8, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	l4 := frames.Ports(frames.UDP(18), sport, dport)
	if proto == frames.ProtoTCP {
		l4 = frames.Ports(frames.TCP(6), sport, dport)
	}
	if s.Is4() {
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(proto, 0, l4), s, d))
	}
	return frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(proto, l4), s, d))
}

func ruleFlows() []ruleFlow {
	const udp, tcp = frames.ProtoUDP, frames.ProtoTCP
	flow := func(name string, frame []byte, count int, rule string, drop bool) ruleFlow {
		class := bpf.IPv4Class(frame[23])
		if frame[12] == 0x86 {
			class = bpf.IPv6Class(frame[20])
		}
		return ruleFlow{traffic.Flow{Name: name, Frame: frame, Count: count, Class: class}, rule, drop}
	}
	return []ruleFlow{
		flow("mgmt", ipFrame("192.0.2.7", "198.51.100.9", udp, 11211, 9), 7, "mgmt", false),
		flow("memcached", ipFrame("203.0.113.5", "198.51.100.9", udp, 11211, 40000), 11, "memcached-reflection", true),
		flow("dns", ipFrame("203.0.113.5", "198.51.100.53", udp, 40000, 53), 13, "dns-to-resolver", false),
		flow("other udp", ipFrame("203.0.113.5", "198.51.100.9", udp, 5, 9), 17, "", true),
		flow("dns tcp", ipFrame("203.0.113.5", "198.51.100.53", tcp, 40000, 53), 5, "dns-to-resolver", false),
		flow("other tcp", ipFrame("203.0.113.5", "198.51.100.9", tcp, 40000, 80), 3, "", false),
		flow("ipv6 mgmt", ipFrame("2001:db8:1::5", "2001:db8:9::1", udp, 11211, 9), 4, "mgmt", false),
		flow("ipv6 memcached", ipFrame("2001:db8:2::5", "2001:db8:9::1", udp, 11211, 9), 6, "memcached-reflection", true),
	}
}

// expectedRuleMetrics are the xdp_drop and xdp_drop_rule points the flows
// must produce: classes by the action each frame got, every rule.
func expectedRuleMetrics(iface string, flows []ruleFlow, rules []Rule, dry bool) []telegraf.Metric {
	type key struct {
		class bpf.Class
		drop  bool
	}
	classes := map[key]bpf.Counter{}
	perRule := map[string]bpf.Counter{}
	for _, f := range flows {
		add := func(c bpf.Counter) bpf.Counter {
			return bpf.Counter{Packets: c.Packets + uint64(f.Count), Bytes: c.Bytes + uint64(f.Count*len(f.Frame))}
		}
		classes[key{f.Class, f.drop}] = add(classes[key{f.Class, f.drop}])
		if f.rule != "" {
			perRule[f.rule] = add(perRule[f.rule])
		}
	}
	action := func(drop bool) string {
		switch {
		case !drop:
			return "pass"
		case dry:
			return "would_drop"
		}
		return "drop"
	}
	var out []telegraf.Metric
	for k, c := range classes {
		out = append(out, testutil.MustMetric("xdp_drop",
			map[string]string{"interface": iface, "family": k.class.Family().String(), "protocol": classProtocol(k.class), "action": action(k.drop)},
			map[string]any{"packets": c.Packets, "bytes": c.Bytes}, time.Unix(0, 0)))
	}
	for _, r := range rules {
		c := perRule[r.Name]
		out = append(out, testutil.MustMetric("xdp_drop_rule",
			map[string]string{"interface": iface, "rule": r.Name, "action": action(r.Action == "drop")},
			map[string]any{"packets": c.Packets, "bytes": c.Bytes}, time.Unix(0, 0)))
	}
	return out
}

// TestRulesLive sends flows through a veth into the plugin's program with
// docs/rules.md's rules: every class counted under the action its frames got,
// every rule (also the one that never matches) with exactly the frames it
// decided, and only passed frames reach the stack behind the veth.
func TestRulesLive(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry_run=%v", dry), func(t *testing.T) {
			ns := testns.New(t)
			rules := exampleRules()
			p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"udp"}, Rules: rules, DryRun: dry, Log: testutil.Logger{}})
			acc := startPlugin(t, ns, p)
			require.Empty(t, acc.Errors)

			// Before any traffic: every rule reported, with zero counts.
			acc = &testutil.Accumulator{}
			inNS(t, ns, p, func() error { return p.Gather(acc) })
			require.Len(t, withTraffic(acc).GetTelegrafMetrics(), len(rules)+1, "one xdp_drop_rule point per rule and the link point, beside the standing series at zero")

			sock, err := ns.OpenPacketSocket(testns.Dev)
			require.NoError(t, err)
			defer sock.Close()
			flows := ruleFlows()
			var plain []traffic.Flow
			total := 0
			for _, f := range flows {
				plain = append(plain, f.Flow)
				total += f.Count
			}
			send(t, ns, plain)
			acc = gatherUntil(t, ns, p, uint64(total))
			require.Empty(t, acc.Errors)

			id, err := ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			want := append(expectedRuleMetrics(testns.Dev, flows, rules, dry), linkMetric(testns.Dev, "native", id))
			testutil.RequireMetricsEqual(t, want, acc.GetTelegrafMetrics(), testutil.IgnoreTime(), testutil.SortMetrics())

			passed := 0
			for _, f := range flows {
				if !f.drop || dry {
					passed += f.Count
				}
			}
			seen, err := sock.Receive(passed, testns.Hang)
			require.NoError(t, err)
			for _, f := range flows {
				n := 0
				for _, s := range seen {
					if bytes.Equal(s, f.Frame) {
						n++
					}
				}
				want := f.Count
				if f.drop && !dry {
					want = 0
				}
				require.Equal(t, want, n, "%s: frames that reached the stack", f.Name)
			}
		})
	}
}
