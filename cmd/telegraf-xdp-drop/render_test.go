package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// shownHistory is the history after a screen: rates are shown.
func shownHistory() *history {
	h := newHistory()
	h.shown = true
	return h
}

func counterPoint(key xdp_drop.SeriesKey, packets, bytes uint64) xdp_drop.Series {
	return xdp_drop.Series{SeriesKey: key, Packets: packets, Bytes: bytes}
}

func tagsOf(iface, family, protocol, action string, extra ...string) xdp_drop.SeriesKey {
	k := xdp_drop.SeriesKey{Interface: iface, Family: family, Protocol: protocol, Action: action}
	for i := 0; i+1 < len(extra); i += 2 {
		switch extra[i] {
		case xdp_drop.TagRxQueue:
			k.RxQueue = extra[i+1]
		case xdp_drop.TagCPU:
			k.CPU = extra[i+1]
		}
	}
	return k
}

func rulePoint(iface, rule, action string, packets, bytes uint64) xdp_drop.RuleSeries {
	return xdp_drop.RuleSeries{Interface: iface, Rule: rule, Action: action, Packets: packets, Bytes: bytes}
}

// requireFits fails on any line of screen wider than the view's width.
func requireFits(t *testing.T, screen string) {
	t.Helper()
	for _, line := range strings.Split(screen, "\n") {
		require.LessOrEqual(t, utf8.RuneCountInString(line), width, "line wider than %d columns: %q", width, line)
	}
}

// TestRenderScreen checks one screen of the watch view against a snapshot
// worked out by hand: rates from the previous totals over 2 s, a counter
// that went back (a restarted program) counted from zero, a series seen for
// the first time, per-queue and per-CPU rows, totals per action, and the
// link lines, a long error cut to the width.
func TestRenderScreen(t *testing.T) {
	now := time.Date(2026, 11, 30, 2, 37, 14, 0, time.UTC)
	h := shownHistory()
	setPrev := func(k xdp_drop.SeriesKey, packets, bytes uint64) {
		h.series[k] = sample{packets, bytes}
	}
	setPrev(tagsOf("eth1", "ipv4", "udp", "drop"), 1000, 60000)
	setPrev(tagsOf("eth1", "ipv4", "tcp", "pass"), 40, 2400)
	setPrev(tagsOf("eth1", "ipv6", "ipv6-icmp", "drop"), 500, 59000) // more than now: a reset

	points := xdp_drop.Snapshot{Series: []xdp_drop.Series{
		counterPoint(tagsOf("eth1", "ipv4", "tcp", "pass"), 40, 2400),
		counterPoint(tagsOf("eth1", "ipv4", "udp", "drop"), 3000, 180000),
		counterPoint(tagsOf("eth1", "ipv6", "ipv6-icmp", "drop"), 10, 1180),
		counterPoint(tagsOf("eth2", "l2", "arp", "pass", "rx_queue", "3", "cpu", "0"), 6, 252),
		counterPoint(tagsOf("eth2", "ipv4", "udp", "drop", "rx_queue", "3", "cpu", "1"), 20_000_000, 1_200_000_000),
	}, Links: []xdp_drop.Link{
		{Interface: "eth1", Mode: "native", Attached: true, ProgramID: 42},
		{Interface: "eth3", Mode: "generic", Attached: false,
			Error: `interface "eth3" not found (interfaces here: eth0, eth1, eth2, lo); it is attached once it appears`},
	}}
	want := strings.Join([]string{
		"xdp_drop watch  2026-11-30 02:37:14  every 1s  (Ctrl-C detaches and quits)",
		"INTERFACE    FAMILY PROTOCOL      ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         ipv4   udp           drop             1,000  60.0 kB/s       3,000",
		"eth1         ipv6   ipv6-icmp     drop                 5  590.0 B/s          10",
		"eth1         ipv4   tcp           pass                 0    0.0 B/s          40",
		"eth2/q3/c0   l2     arp           pass                 3  126.0 B/s           6",
		"eth2/q3/c1   ipv4   udp           drop        10,000,000 600.0 MB/s  20,000,000",
		"total                             drop        10,001,005 600.1 MB/s",
		"total                             pass                 3  126.0 B/s",
		"link eth1: attached, native mode, program id 42",
		`link eth3: NOT attached: interface "eth3" not found (interfaces here: eth0, ...`,
		"",
	}, "\n")
	got := render(points, h, 2*time.Second, now, time.Second)
	require.Equal(t, want, got)
	requireFits(t, got)

	// h now holds these totals: the same counters again are 0/s.
	again := render(points, h, time.Second, now, time.Second)
	for _, line := range strings.Split(again, "\n")[2:9] {
		require.Regexp(t, `\s0\s+0\.0 B/s(\s|$)`, line)
	}
}

// TestRenderWouldDrop: a dry run's would_drop rows get their own total,
// between drop and pass.
func TestRenderWouldDrop(t *testing.T) {
	points := xdp_drop.Snapshot{Series: []xdp_drop.Series{
		counterPoint(tagsOf("eth1", "ipv4", "udp", "would_drop"), 10, 1000),
		counterPoint(tagsOf("eth1", "ipv4", "tcp", "pass"), 4, 400),
	}}
	got := render(points, shownHistory(), time.Second, time.Time{}, time.Second)
	require.Contains(t, got, "\ntotal                             would_drop          10   1.0 kB/s\ntotal                             pass                 4  400.0 B/s\n")
}

// TestRenderLeavesZerosOut: a standing series no frame reached has no row.
func TestRenderLeavesZerosOut(t *testing.T) {
	points := xdp_drop.Snapshot{Series: []xdp_drop.Series{
		counterPoint(tagsOf("eth1", "ipv4", "udp", "drop"), 10, 1000),
		counterPoint(tagsOf("eth1", "ipv4", "icmp", "pass"), 0, 0),
	}}
	got := render(points, newHistory(), time.Second, time.Time{}, time.Second)
	require.Contains(t, got, "udp")
	require.NotContains(t, got, "icmp")
}

// longRule is a rule name of the most characters a name may have.
const longRule = "shed-reflection-from-the-upstream-transit-provider-at-site-ams-1"

// TestRenderRules checks the rule section over two screens worked out by
// hand: per interface (sorted as the class rows are) the rules in config
// order, not by name or rate; a rule that never matched at zero; rates from
// the first screen's totals over 2 s; a counter that went back counted from
// zero, as one whose bytes alone went back; a 64-character name that keeps
// both ends; and an interface name too long for its column on a line of its
// own. The first screen has no earlier counters: totals only, no rates.
func TestRenderRules(t *testing.T) {
	require.Len(t, longRule, 64)
	now := time.Date(2026, 11, 30, 2, 37, 14, 0, time.UTC)
	const wide = "enp129s0f1np1" // 13 characters: one more than the column
	snap := func(mgmt, memcached, dns, widePkts, wideBytes uint64) xdp_drop.Snapshot {
		return xdp_drop.Snapshot{
			Series: []xdp_drop.Series{
				counterPoint(tagsOf("eth1", "ipv4", "udp", "drop"), memcached+500, (memcached+500)*60),
				counterPoint(tagsOf("eth1", "ipv4", "udp", "pass"), mgmt+dns, (mgmt+dns)*100),
			},
			Rules: []xdp_drop.RuleSeries{
				// Snapshot's order: interfaces as configured, rules as configured.
				rulePoint("eth2", "mgmt", "pass", 0, 0),
				rulePoint("eth2", longRule, "drop", 0, 0),
				rulePoint(wide, "mgmt", "pass", widePkts, wideBytes),
				rulePoint(wide, longRule, "drop", 0, 0),
				rulePoint("eth1", "mgmt", "pass", mgmt, mgmt*100),
				rulePoint("eth1", "memcached-reflection", "drop", memcached, memcached*60),
				rulePoint("eth1", longRule, "drop", 0, 0),
				rulePoint("eth1", "dns-to-resolver", "pass", dns, dns*100),
			},
			Links: []xdp_drop.Link{{Interface: "eth1", Mode: "native", Attached: true, ProgramID: 42}},
		}
	}
	h := newHistory()
	first := render(snap(100, 4000, 30, 1000, 100_000), h, time.Second, now, time.Second)
	want := strings.Join([]string{
		"xdp_drop watch  2026-11-30 02:37:14  every 1s  (Ctrl-C detaches and quits)",
		"INTERFACE    FAMILY PROTOCOL      ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         ipv4   udp           drop                 -          -       4,500",
		"eth1         ipv4   udp           pass                 -          -         130",
		"total                             drop                 -          -",
		"total                             pass                 -          -",
		"INTERFACE    RULE                 ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"enp129s0f1np1",
		"             mgmt                 pass                 -          -       1,000",
		"             shed-refl...te-ams-1 drop                 -          -           0",
		"eth1         mgmt                 pass                 -          -         100",
		"eth1         memcached-reflection drop                 -          -       4,000",
		"eth1         shed-refl...te-ams-1 drop                 -          -           0",
		"eth1         dns-to-resolver      pass                 -          -          30",
		"eth2         mgmt                 pass                 -          -           0",
		"eth2         shed-refl...te-ams-1 drop                 -          -           0",
		"link eth1: attached, native mode, program id 42",
		"",
	}, "\n")
	require.Equal(t, want, first)

	// 2 s later: mgmt +300, memcached restarted at 30 (a new program) and
	// with it the dropped UDP, dns +0, the wide interface's mgmt +1000
	// frames but fewer bytes (restarted and counted more since): resets
	// count from zero.
	second := render(snap(400, 30, 30, 2000, 50_000), h, 2*time.Second, now, time.Second)
	want = strings.Join([]string{
		"xdp_drop watch  2026-11-30 02:37:14  every 1s  (Ctrl-C detaches and quits)",
		"INTERFACE    FAMILY PROTOCOL      ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         ipv4   udp           drop               265  15.9 kB/s         530",
		"eth1         ipv4   udp           pass               150  15.0 kB/s         430",
		"total                             drop               265  15.9 kB/s",
		"total                             pass               150  15.0 kB/s",
		"INTERFACE    RULE                 ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"enp129s0f1np1",
		"             mgmt                 pass             1,000  25.0 kB/s       2,000",
		"             shed-refl...te-ams-1 drop                 0    0.0 B/s           0",
		"eth1         mgmt                 pass               150  15.0 kB/s         400",
		"eth1         memcached-reflection drop                15  900.0 B/s          30",
		"eth1         shed-refl...te-ams-1 drop                 0    0.0 B/s           0",
		"eth1         dns-to-resolver      pass                 0    0.0 B/s          30",
		"eth2         mgmt                 pass                 0    0.0 B/s           0",
		"eth2         shed-refl...te-ams-1 drop                 0    0.0 B/s           0",
		"link eth1: attached, native mode, program id 42",
		"",
	}, "\n")
	require.Equal(t, want, second)
	requireFits(t, first)
	requireFits(t, second)
}

// TestRenderRulesDryRun: in a dry run a drop rule shows would_drop, as its
// xdp_drop_rule point's action tag says.
func TestRenderRulesDryRun(t *testing.T) {
	snap := xdp_drop.Snapshot{Rules: []xdp_drop.RuleSeries{
		rulePoint("eth1", "mgmt", xdp_drop.ActionPass, 7, 700),
		rulePoint("eth1", "memcached-reflection", xdp_drop.ActionWouldDrop, 11, 660),
	}}
	got := render(snap, shownHistory(), time.Second, time.Time{}, time.Second)
	require.Contains(t, got, "\n"+strings.Join([]string{
		"INTERFACE    RULE                 ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         mgmt                 pass                 7  700.0 B/s           7",
		"eth1         memcached-reflection would_drop          11  660.0 B/s          11",
	}, "\n")+"\n")
}

// TestRenderLimitRule: the pass and drop rows of a limit rule each have
// their own rate.
func TestRenderLimitRule(t *testing.T) {
	h := newHistory()
	snap := xdp_drop.Snapshot{Rules: []xdp_drop.RuleSeries{
		rulePoint("eth1", "dns", xdp_drop.ActionPass, 100, 6000),
		rulePoint("eth1", "dns", xdp_drop.ActionDrop, 900, 54000),
	}}
	render(snap, h, time.Second, time.Time{}, time.Second)
	snap.Rules = []xdp_drop.RuleSeries{
		rulePoint("eth1", "dns", xdp_drop.ActionPass, 110, 6600),
		rulePoint("eth1", "dns", xdp_drop.ActionDrop, 1000, 60000),
	}
	got := render(snap, h, time.Second, time.Time{}, time.Second)
	require.Contains(t, got, "\n"+strings.Join([]string{
		"INTERFACE    RULE                 ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         dns                  pass                10  600.0 B/s         110",
		"eth1         dns                  drop               100   6.0 kB/s       1,000",
	}, "\n")+"\n")
}

// TestRenderHugeTotals: totals and rates up to 2^64-1 keep their columns,
// exact while they fit and with three significant digits and an SI prefix
// past that, rounded up into the next prefix where rounding carries.
func TestRenderHugeTotals(t *testing.T) {
	const max = math.MaxUint64
	h := shownHistory()
	key := func(proto string) xdp_drop.SeriesKey { return tagsOf("eth1", "ipv4", proto, "drop") }
	// The last screen's totals, for the rates of 1 s.
	h.series[key("udp")] = sample{0, 0}
	h.series[key("tcp")] = sample{1, 40}
	h.series[key("gre")] = sample{0, 0}
	h.series[key("sctp")] = sample{0, 0}
	h.series[key("icmp")] = sample{0, 0}
	snap := xdp_drop.Snapshot{
		Series: []xdp_drop.Series{
			counterPoint(key("udp"), max, max),                              // rates of 2^64-1 per second
			counterPoint(key("tcp"), 1_000_000_000, 999_960_040),            // 999,999,999/s: still exact; 999.96 MB/s rounds to 1.0 GB/s
			counterPoint(key("gre"), 999_999_999, 999_950),                  // 999.95 kB/s rounds to 1.0 MB/s
			counterPoint(key("sctp"), 999_999_999_999, 123_456_789_012_345), // 999,999,999,999 rounds up into T
			counterPoint(key("icmp"), 1_234_567_890_123, 1_000),
		},
		Rules: []xdp_drop.RuleSeries{rulePoint("eth1", "all", "drop", max, max)},
	}
	got := render(snap, h, time.Second, time.Time{}, time.Second)
	want := strings.Join([]string{
		"xdp_drop watch  0001-01-01 00:00:00  every 1s  (Ctrl-C detaches and quits)",
		"INTERFACE    FAMILY PROTOCOL      ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         ipv4   udp           drop             18.4E  18.4 EB/s       18.4E",
		"eth1         ipv4   icmp          drop             1.23T   1.0 kB/s       1.23T",
		"eth1         ipv4   sctp          drop             1.00T 123.5 TB/s       1.00T",
		"eth1         ipv4   gre           drop       999,999,999   1.0 MB/s 999,999,999",
		"eth1         ipv4   tcp           drop       999,999,999   1.0 GB/s       1.00G",
		"total                             drop             18.4E  18.4 EB/s",
		"INTERFACE    RULE                 ACTION          PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         all                  drop             18.4E  18.4 EB/s       18.4E",
		"",
	}, "\n")
	require.Equal(t, want, got)
	requireFits(t, got)
}

// TestRenderFits is a property test: for random snapshots (counters
// anywhere up to 2^64-1, resets, elapsed times from 1 ns to an hour, long
// interface names with queue and CPU, protocol keywords, 64-character rule
// names, long errors) no line is wider than the view, every table row is
// exactly as wide (its columns aligned), and every interface label is shown
// whole.
func TestRenderFits(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	counter := func() uint64 { // every magnitude equally likely
		return rnd.Uint64() >> rnd.UintN(65)
	}
	text := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(b)
	}
	ifname := func() string {
		var b strings.Builder
		for range 1 + rnd.IntN(15) {
			if rnd.IntN(4) == 0 { // a byte tagName escaped
				fmt.Fprintf(&b, `\x%02x`, rnd.IntN(256))
			} else {
				b.WriteString(text("abcdefghijklmnopqrstuvwxyz0123456789_.-", 1))
			}
		}
		return b.String()
	}
	protocols := []string{"udp", "tcp", "ipv6-icmp", "rsvp-e2e-ignore", "mobility-header", "vlan_overflow", "truncated", "253"}
	for range 2000 {
		h := newHistory()
		var snap xdp_drop.Snapshot
		var labels []string
		for range rnd.IntN(12) {
			k := xdp_drop.SeriesKey{
				Interface: ifname(),
				Family:    []string{"ipv4", "ipv6", "l2"}[rnd.IntN(3)],
				Protocol:  protocols[rnd.IntN(len(protocols))],
				Action:    xdp_drop.Actions[rnd.IntN(len(xdp_drop.Actions))],
			}
			if rnd.IntN(2) == 0 {
				k.RxQueue = []string{"0", "63", "overflow"}[rnd.IntN(3)]
			}
			if rnd.IntN(2) == 0 {
				k.CPU = fmt.Sprint(rnd.IntN(8192))
			}
			if rnd.IntN(2) == 0 {
				h.series[k] = sample{counter(), counter()}
			}
			// At least one packet: the view leaves series at zero out.
			snap.Series = append(snap.Series, counterPoint(k, counter()|1, counter()))
			labels = append(labels, seriesLabel(k))
		}
		for range rnd.IntN(6) {
			name := text("abcdefghijklmnopqrstuvwxyz0123456789_.-", 1+rnd.IntN(64))
			iface := ifname()
			action := xdp_drop.Actions[rnd.IntN(3)]
			if rnd.IntN(2) == 0 {
				h.rules[ruleKey{iface, name, action}] = sample{counter(), counter()}
			}
			snap.Rules = append(snap.Rules, rulePoint(iface, name, action, counter(), counter()))
			labels = append(labels, iface)
		}
		for range rnd.IntN(3) {
			snap.Links = append(snap.Links, xdp_drop.Link{
				Interface: ifname(), Mode: "generic", Attached: rnd.IntN(2) == 0, Fallback: rnd.IntN(2) == 0,
				ProgramID: rnd.Int64(), Error: text("abcdefghij ", rnd.IntN(300)),
			})
		}
		elapsed := time.Duration(1 + rnd.Int64N(int64(time.Hour)))
		screen := render(snap, h, elapsed, time.Now(), time.Second)
		requireFits(t, screen)
		lines := strings.Split(strings.TrimSuffix(screen, "\n"), "\n")
		for _, line := range lines[1:] {
			if strings.HasPrefix(line, "total ") || strings.HasPrefix(line, "link ") || !strings.Contains(line, " ") {
				continue // not a row: a total, a link, a label on its own line
			}
			require.Equal(t, width, utf8.RuneCountInString(line), "row not as wide as the view: %q", line)
		}
		for _, label := range labels {
			shown := false
			for _, line := range lines {
				shown = shown || line == label || strings.HasPrefix(line, label+" ")
			}
			require.True(t, shown, "label %q not shown whole in\n%s", label, screen)
		}
	}
}

// TestRenderFirstScreen: the first screen has no earlier counters, so its
// rate columns hold "-" rather than the totals since attach taken for a
// second's rate (a 5,585-frame total shown as 5,585 pkts/s); the second
// screen shows the rate over the time between them.
func TestRenderFirstScreen(t *testing.T) {
	h := newHistory()
	key := tagsOf("eth1", "ipv4", "udp", "drop")
	snap := xdp_drop.Snapshot{
		Series: []xdp_drop.Series{counterPoint(key, 5585, 335100)},
		Rules:  []xdp_drop.RuleSeries{rulePoint("eth1", "memcached", "drop", 5585, 335100)},
	}
	first := render(snap, h, time.Second, time.Time{}, time.Second)
	require.Contains(t, first, "\neth1         ipv4   udp           drop                 -          -       5,585\n")
	require.Contains(t, first, "\ntotal                             drop                 -          -\n")
	require.Contains(t, first, "\neth1         memcached            drop                 -          -       5,585\n")
	requireFits(t, first)

	snap.Series[0].Packets, snap.Series[0].Bytes = 5605, 336300
	snap.Rules[0].Packets, snap.Rules[0].Bytes = 5605, 336300
	second := render(snap, h, 2*time.Second, time.Time{}, time.Second)
	require.Contains(t, second, "\neth1         ipv4   udp           drop                10  600.0 B/s       5,605\n")
	require.Contains(t, second, "\ntotal                             drop                10  600.0 B/s\n")
	require.Contains(t, second, "\neth1         memcached            drop                10  600.0 B/s       5,605\n")
}

// TestRenderTopSources: the top sources of the interval, per interface and
// action, with their estimated rate and share; the link line carries the
// sampling counters.
func TestRenderTopSources(t *testing.T) {
	now := time.Date(2026, 11, 30, 2, 37, 14, 0, time.UTC)
	snap := xdp_drop.Snapshot{
		Series: []xdp_drop.Series{counterPoint(tagsOf("eth1", "ipv4", "udp", "drop"), 1000, 60000)},
		Top: []xdp_drop.TopSource{
			{Interface: "eth1", Action: "drop", Rank: 1, Source: "203.0.113.0/24", Packets: 8000, Share: 0.8, Protocol: "udp"},
			{Interface: "eth1", Action: "drop", Rank: 2, Source: "2001:db8:1234:5678::/64", Packets: 2000, Share: 0.2, Protocol: "ipv6-icmp"},
		},
		Links: []xdp_drop.Link{{Interface: "eth1", Mode: "native", Attached: true, ProgramID: 42, Sampling: true, Sampled: 10, SampleCapped: 3}},
	}
	got := render(snap, newHistory(), 2*time.Second, now, 2*time.Second)
	require.Contains(t, got, "INTERFACE    TOP SOURCE (sampled)      ACTION          PKTS/S  SHARE PROTOCOL\n"+
		"eth1         203.0.113.0/24            drop             4,000  80.0% udp\n"+
		"eth1         2001:db8:1234:5678::/64   drop             1,000  20.0% ipv6-icmp\n")
	require.Contains(t, got, "link eth1: attached, native mode, program id 42; sampled 10, lost 0, capped 3\n")
	for _, line := range strings.Split(got, "\n") {
		require.LessOrEqual(t, utf8.RuneCountInString(line), width, line)
	}
}
