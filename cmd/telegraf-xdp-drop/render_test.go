package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

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

// TestRenderScreen checks one screen of the watch view against a snapshot
// worked out by hand: rates from the previous totals over 2 s, a counter
// that went back (a restarted program) counted from zero, a series seen for
// the first time, per-queue and per-CPU rows, totals per action, and the
// link lines, a long error cut to 80 columns.
func TestRenderScreen(t *testing.T) {
	now := time.Date(2026, 11, 30, 2, 37, 14, 0, time.UTC)
	prev := map[xdp_drop.SeriesKey]sample{}
	setPrev := func(k xdp_drop.SeriesKey, packets, bytes uint64) {
		prev[k] = sample{packets, bytes}
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
		"INTERFACE    FAMILY PROTOCOL    ACTION           PKTS/S    BYTES/S  TOTAL PKTS",
		"eth1         ipv4   udp         drop              1,000  60.0 kB/s       3,000",
		"eth1         ipv6   ipv6-icmp   drop                  5  590.0 B/s          10",
		"eth1         ipv4   tcp         pass                  0    0.0 B/s          40",
		"eth2/q3/c0   l2     arp         pass                  3  126.0 B/s           6",
		"eth2/q3/c1   ipv4   udp         drop         10,000,000 600.0 MB/s  20,000,000",
		"total                           drop         10,001,005 600.1 MB/s",
		"total                           pass                  3  126.0 B/s",
		"link eth1: attached, native mode, program id 42",
		`link eth3: NOT attached: interface "eth3" not found (interfaces here: eth0, ...`,
		"",
	}, "\n")
	got := render(points, prev, 2*time.Second, now, time.Second)
	require.Equal(t, want, got)

	// prev now holds these totals: the same counters again are 0/s.
	again := render(points, prev, time.Second, now, time.Second)
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
	got := render(points, map[xdp_drop.SeriesKey]sample{}, time.Second, time.Time{}, time.Second)
	require.Contains(t, got, "\ntotal                           would_drop           10   1.0 kB/s\ntotal                           pass                  4  400.0 B/s\n")
}
