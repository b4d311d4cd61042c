//go:build linux

package xdp_drop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// floodFrames sends each frame at about perSecond a second, until done
// says so (a minute at most); it returns how long it flooded.
func floodFrames(t *testing.T, ns *testns.NS, fs [][]byte, perSecond int, done func() bool) time.Duration {
	t.Helper()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	const step = 20 * time.Millisecond
	batch := perSecond * int(step) / int(time.Second)
	start := time.Now()
	next := start
	for !done() {
		require.Less(t, time.Since(start), testns.Hang, "flooded %v and it is not done", testns.Hang)
		for _, f := range fs {
			require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, f, batch) }))
		}
		next = next.Add(step)
		time.Sleep(time.Until(next))
	}
	return time.Since(start)
}

// pushingLAPI is a real LAPI with a machine detection pushes as, and the
// bans' settings that pull from it and push to it.
func pushingLAPI(t *testing.T, login string) (*lapi.LAPI, *BansConfig, string) {
	l := lapi.Start(t)
	pwFile := filepath.Join(t.TempDir(), "machine.pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("evidence-pass-word\n"), 0o600))
	l.Cscli("machines", "add", login, "--password", "evidence-pass-word", "--force", "-f", filepath.Join(t.TempDir(), "creds.yaml"))
	key := l.AddBouncer(login)
	return l, &BansConfig{CrowdSec: &CrowdSecConfig{URL: l.URL(), APIKey: key, Interval: config.Duration(testBanInterval)}}, pwFile
}

// alertSources lists the sources of the LAPI's alerts.
func alertSources(t *testing.T, l *lapi.LAPI) []string {
	t.Helper()
	var alerts []struct {
		Source struct{ Value string } `json:"source"`
	}
	out := l.Cscli("alerts", "list", "-o", "json")
	if out != "null" && out != "" {
		require.NoError(t, json.Unmarshal([]byte(out), &alerts), out)
	}
	var got []string
	for _, a := range alerts {
		got = append(got, a.Source.Value)
	}
	sort.Strings(got)
	return got
}

// TestDetectSpoofedVictims: an attacker forging one address in each of 15
// victims' /24s, each over pps, with the default options and crowdsec_push:
// at most the unverified half of max_bans_per_minute bans are made (each
// of the forged address alone, not its /24; unverified, so a limit), one
// budget event says the rest were not banned, nothing is pushed, and a
// bystander in a victim's /24 that never sent a frame passes whole.
func TestDetectSpoofedVictims(t *testing.T) {
	l, b, pw := pushingLAPI(t, "xdp-drop-victims")
	ns := testns.New(t)
	p := detectPlugin(&DetectConfig{
		PPS: 500, DryRun: enforce(),
		CrowdSecPush: true, CrowdSecLogin: "xdp-drop-victims", CrowdSecPasswordFile: pw,
	}, b)
	p.Namespace, p.SampleRate = ns.Name, 10
	require.Empty(t, startPlugin(t, ns, p).Errors)
	var victims []string
	for i := range 15 {
		victims = append(victims, fmt.Sprintf("198.18.%d.53", i+1))
	}
	var events []telegraf.Metric
	var last telegraf.Metric
	flood(t, ns, victims, 1500, func() bool {
		ban, ev := gatherDetect(t, ns, p)
		events, last = append(events, ev...), ban
		return field(ban.Fields(), FieldBudgetSpent) >= 5
	})
	// What the fields say is what the kernel holds: unverified evidence
	// gets the larger half of the budget, the rest is kept for verified.
	want := DefaultMaxBansPerMinute - DefaultMaxBansPerMinute/2
	f := last.Fields()
	require.Equal(t, int64(want), field(f, FieldAdded), "the budget: %v", f)
	require.Equal(t, int64(want), field(f, FieldAddedUnverified))
	require.Zero(t, field(f, FieldAddedVerified))
	require.Equal(t, int64(0), field(f, FieldPushed))
	held := map[string]uint64{}
	p.mu.Lock()
	for _, ifc := range p.links.ifaces {
		if ifc.prog != nil {
			tbl, err := ifc.prog.Bans()
			require.NoError(t, err)
			for _, e := range tbl.Entries() {
				held[e.Prefix.String()] = e.LimitPPS
			}
			break
		}
	}
	p.mu.Unlock()
	require.Len(t, held, want)
	budget := 0
	for _, e := range events {
		switch e.Tags()[TagEvent] {
		case EventBan:
			src := e.Fields()[FieldSource].(string)
			require.Contains(t, held, src)
			require.Equal(t, uint64(500), held[src], "a limit at pps")
			require.Equal(t, false, e.Fields()[FieldVerified])
			require.Equal(t, 500.0, e.Fields()[FieldLimitPPS])
		case EventBudget:
			budget++
		}
	}
	require.Equal(t, 1, budget, "one budget event")
	for src := range held {
		require.Contains(t, victims, src[:len(src)-3], "the forged address alone: %s", src)
	}
	// The bystander of a victim /24 passes whole; nothing reached the LAPI.
	sendBanFlows(t, ns, banFlow{"198.18.1.1", 200, 200}, banFlow{"198.18.2.1", 200, 200})
	time.Sleep(3 * testBanInterval)
	require.Empty(t, alertSources(t, l))
}

// establish makes a TCP connection to a listener on 10.9.0.1:8080 (the
// test veth's address) from 10.9.1.77, a host in a second namespace
// reached over a veth of its own, and returns the client's port; it is
// closed with the test.
func establish(t *testing.T, ns *testns.NS) uint16 {
	t.Helper()
	client := testns.New(t)
	_, _, err := ns.AddVeth("xdpc0", "xdpc1")
	require.NoError(t, err)
	fd, err := unix.Open(client.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	up := func(h *netlink.Handle, name, cidr string) error {
		link, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(cidr)
		if err := h.AddrAdd(link, a); err != nil {
			return err
		}
		return h.LinkSetUp(link)
	}
	require.NoError(t, ns.Do(func() error {
		link, err := ns.Netlink().LinkByName("xdpc1")
		if err != nil {
			return err
		}
		if err := ns.Netlink().LinkSetNsFd(link, fd); err != nil {
			return err
		}
		if err := up(ns.Netlink(), testns.Dev, "10.9.0.1/24"); err != nil {
			return err
		}
		return up(ns.Netlink(), "xdpc0", "10.9.1.1/24")
	}))
	var conn net.Conn
	var ln net.Listener
	require.NoError(t, ns.Do(func() error {
		ln, err = net.Listen("tcp4", "10.9.0.1:8080")
		return err
	}))
	require.NoError(t, client.Do(func() error {
		if err := up(client.Netlink(), "xdpc1", "10.9.1.77/24"); err != nil {
			return err
		}
		link, err := client.Netlink().LinkByName("xdpc1")
		if err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("10.9.0.0/24")
		if err := client.Netlink().RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Gw: net.ParseIP("10.9.1.1")}); err != nil {
			return err
		}
		conn, err = net.DialTimeout("tcp4", "10.9.0.1:8080", 5*time.Second)
		return err
	}))
	server, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(); server.Close(); ln.Close() })
	return uint16(conn.LocalAddr().(*net.TCPAddr).Port)
}

// TestDetectVerifiedFlood: a TCP flood on a connection the host has
// established is verified: banned as a drop (dropped whole, not limited),
// and pushed with its evidence verified, by default options.
func TestDetectVerifiedFlood(t *testing.T) {
	l, b, pw := pushingLAPI(t, "xdp-drop-verified")
	ns := testns.New(t)
	port := establish(t, ns)
	p := detectPlugin(&DetectConfig{
		PPS: 1000, DryRun: enforce(),
		CrowdSecPush: true, CrowdSecLogin: "xdp-drop-verified", CrowdSecPasswordFile: pw,
	}, b)
	p.Namespace = ns.Name
	require.Empty(t, startPlugin(t, ns, p).Errors)
	tcp := ipFrame("10.9.1.77", "10.9.0.1", frames.ProtoTCP, port, 8080)
	var events []telegraf.Metric
	floodFrames(t, ns, [][]byte{tcp}, 10_000, func() bool {
		_, ev := gatherDetect(t, ns, p)
		events = append(events, ev...)
		return banCounter(t, p, bpf.BanDrop) > 0
	})
	for deadline := time.Now().Add(testns.Hang); ; time.Sleep(50 * time.Millisecond) {
		ban, ev := gatherDetect(t, ns, p)
		events = append(events, ev...)
		if field(ban.Fields(), FieldPushed) == 1 {
			require.Equal(t, int64(1), field(ban.Fields(), FieldAddedVerified))
			break
		}
		require.True(t, time.Now().Before(deadline), "the ban not pushed within %v: %v", testns.Hang, ban.Fields())
	}
	require.Len(t, events, 1)
	require.Equal(t, "10.9.1.77/32", events[0].Fields()[FieldSource])
	require.Equal(t, true, events[0].Fields()[FieldVerified])
	require.Equal(t, 0.0, events[0].Fields()[FieldLimitPPS])
	require.Equal(t, []string{"10.9.1.77"}, alertSources(t, l))
	// Dropped whole: none of 300 more reaches the stack.
	sendOnFrames(t, ns, tcp, 300, 0)
}

// sendOnFrames sends count copies of frame through the peer, then a
// frame of a source no ban holds, and checks that exactly passed of the
// copies reached the stack behind the veth before it.
func sendOnFrames(t *testing.T, ns *testns.NS, frame []byte, count, passed int) {
	t.Helper()
	sock, err := ns.OpenPacketSocket(testns.Dev)
	require.NoError(t, err)
	defer sock.Close()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	witness := banFlow{src: "203.0.113.1"}.frame()
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, count) }))
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, witness, 1) }))
	seen, err := sock.Receive(passed+1, testns.Hang)
	require.NoError(t, err)
	n := 0
	for _, s := range seen {
		if bytes.Equal(s, frame) {
			n++
		}
	}
	require.Equal(t, passed, n)
}

// TestDetectBudgetAcrossReload: a reload does not renew the budget. With
// max_bans_per_minute = 4, the two unverified bans made before a handover
// (the unverified half) leave the successor none to make within the
// minute: two more sources over the rate are counted budget_spent, not
// banned, and their frames all pass.
func TestDetectBudgetAcrossReload(t *testing.T) {
	ns := testns.New(t)
	cfg := func() *XDPDrop {
		p := detectPlugin(&DetectConfig{PPS: 1000, DryRun: enforce(), UnverifiedAction: "drop", MaxBansPerMinute: ptr(int64(4))}, nil)
		p.Namespace = ns.Name
		return p
	}
	a := cfg()
	require.Empty(t, startPlugin(t, ns, a).Errors)
	flood(t, ns, []string{"198.51.100.7", "198.51.101.7"}, 10_000, func() bool {
		ban, _ := gatherDetect(t, ns, a)
		return field(ban.Fields(), FieldAdded) == 2
	})

	dir := handOverInProcess(t, ns, a)
	b := cfg()
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	flood(t, ns, []string{"198.51.102.7", "198.51.103.7"}, 10_000, func() bool {
		ban, _ := gatherDetect(t, ns, b)
		return field(ban.Fields(), FieldBudgetSpent) >= 2
	})
	ban, _ := gatherDetect(t, ns, b)
	require.Equal(t, int64(0), field(ban.Fields(), FieldAdded), "no ban past the budget: %v", ban.Fields())
	require.Equal(t, int64(2), field(ban.Fields(), FieldActive), "the predecessor's two")
	sendBanFlows(t, ns, banFlow{"198.51.100.7", 100, 0}, banFlow{"198.51.102.7", 100, 100}, banFlow{"198.51.103.7", 100, 100})
}
