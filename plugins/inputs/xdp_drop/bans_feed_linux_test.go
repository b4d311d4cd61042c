//go:build linux

package xdp_drop

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// feedLink is a TCP relay between the plugin and the LAPI that the test
// cuts and restores, so that the LAPI, up meanwhile, takes cscli's changes
// while the plugin cannot reach it.
type feedLink struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newFeedLink(t *testing.T, lapiURL string) *feedLink {
	u, err := url.Parse(lapiURL)
	require.NoError(t, err)
	f := &feedLink{t: t, target: u.Host}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(f.cut)
	return f
}

func (f *feedLink) URL() string { return "http://" + f.addr + "/" }

func (f *feedLink) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection: the LAPI is unreachable.
func (f *feedLink) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// restore listens again on the same address.
func (f *feedLink) restore() {
	ln, err := net.Listen("tcp", f.addr)
	require.NoError(f.t, err)
	f.serve(ln)
}

// TestBansLAPIDown: with the LAPI out of reach, and then stopped, the bans
// in force stay and the error shows on the point, logged once; the LAPI
// restarted takes a deletion and a new ban while the plugin still cannot
// reach it; when it can, a full resync lifts the one, bans the other, and
// clears the error.
func TestBansLAPIDown(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	l.AddDecision("198.51.100.7", time.Hour)
	link := newFeedLink(t, l.URL())
	ns := testns.New(t)
	p := banPlugin(l, key, nil)
	p.Bans.CrowdSec.URL = link.URL()
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 2 })

	link.cut()
	l.Stop()
	f := waitBans(t, ns, p, "the error of a LAPI down", func(f map[string]any) bool { return f[FieldError] != nil })
	require.Contains(t, f[FieldError], "the bans in force stay until they expire")
	require.Equal(t, int64(2), field(f, FieldActive))
	synced := field(f, FieldSynced)
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 5, 0}, banFlow{"198.51.100.7", 4, 0}, banFlow{"192.0.2.1", 3, 3})

	// Made while the plugin cannot reach it: seen at the resync.
	l.Restart()
	l.DeleteDecision("198.51.100.7")
	l.AddDecision("192.0.2.1", time.Hour)
	f, _ = banPoint(t, ns, p)
	require.Equal(t, synced, field(f, FieldSynced), "synced stands still while the LAPI is out of reach")
	require.Equal(t, int64(2), field(f, FieldActive))
	link.restore()
	f = waitBans(t, ns, p, "the resync once the LAPI is reached", func(f map[string]any) bool {
		return f[FieldError] == nil && field(f, FieldRemoved) == 1 && field(f, FieldActive) == 2
	})
	require.Greater(t, field(f, FieldSynced), synced)
	require.Equal(t, int64(3), field(f, FieldAdded))
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 5, 0}, banFlow{"198.51.100.7", 4, 4}, banFlow{"192.0.2.1", 3, 0})

	errs := 0
	for _, err := range acc.Errors {
		if strings.Contains(err.Error(), "bans: crowdsec:") {
			errs++
		}
	}
	require.Equal(t, 1, errs, "the LAPI down is reported once, not at every retry: %v", acc.Errors)
}

// TestBansReloadUnderTraffic: a reload (the instance hands its interfaces
// and maps over, its successor takes them) under a stream from a banned
// source lets none of its frames pass, while frames of another source
// pass all along; the successor reports synced only after its own pull.
func TestBansReloadUnderTraffic(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	ns := testns.New(t)
	// With GRO the veth takes frames in while it has no XDP program: an
	// unfiltered moment would show at the sink.
	require.NoError(t, ns.EnableGRO(testns.Dev))
	a := banPlugin(l, key, nil)
	require.Empty(t, startPlugin(t, ns, a).Errors)
	waitBans(t, ns, a, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 1 })

	sink, err := ns.OpenPacketSocket(testns.Dev)
	require.NoError(t, err)
	defer sink.Close()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	banned, other := banFlow{src: "203.0.113.5"}.frame(), banFlow{src: "198.51.100.1"}.frame()
	var sentOther atomic.Int64
	s := txgen.NewStream(1, func() (int, error) {
		if err := ns.Do(func() error { return gen.Send(ns.PeerIdx, banned, 64) }); err != nil {
			return 0, err
		}
		if err := ns.Do(func() error { return gen.Send(ns.PeerIdx, other, 1) }); err != nil {
			return 64, err
		}
		sentOther.Add(1)
		return 64, nil
	})
	defer s.Stop()
	require.NoError(t, s.WaitSent(5000, testns.Hang))
	dir := handOverInProcess(t, ns, a)
	b := banPlugin(l, key, nil)
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	f := waitBans(t, ns, b, "the successor's first pull", func(f map[string]any) bool { return field(f, FieldSynced) > 0 })
	require.Equal(t, int64(1), field(f, FieldActive))
	require.Equal(t, int64(0), field(f, FieldAdded), "the ban was handed over, not added again")
	require.NoError(t, s.WaitSent(s.Sent()+5000, testns.Hang))
	require.NoError(t, s.Stop())

	got, err := sink.Receive(int(sentOther.Load()), testns.Hang)
	require.NoError(t, err)
	leaked, passed := 0, 0
	for _, s := range got {
		switch {
		case bytes.Equal(s, banned):
			leaked++
		case bytes.Equal(s, other):
			passed++
		}
	}
	t.Logf("%d frames sent from the banned source, %d from another across the reload", s.Sent(), sentOther.Load())
	require.Zero(t, leaked, "frames from the banned source that reached the stack")
	require.Equal(t, int(sentOther.Load()), passed, "frames from the other source all passed")
}

// TestBansSurvivePrefixFileChange: a changed prefix file makes a new
// generation of the kernel side; an interface that appears in the same
// gather is attached on it before the others are swapped onto it. The bans
// in force go on in both: frames from the banned source are dropped on the
// old interface after the swap and on the new one, and a ban added after
// the change is in force.
func TestBansSurvivePrefixFileChange(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	ns := testns.New(t)
	list := t.TempDir() + "/drop.txt"
	writeList(t, list, "192.0.2.0/24")
	p := banPlugin(l, key, nil)
	p.Interfaces = append(p.Interfaces, "xdpb0")
	p.Rules = []Rule{{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}}}
	acc := startPlugin(t, ns, p)
	require.Len(t, acc.Errors, 1, "xdpb0 is not there yet: %v", acc.Errors)
	waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 1 })
	oldID, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)

	writeList(t, list, "192.0.2.0/24", "198.51.100.0/24")
	_, peerB, err := ns.AddVeth("xdpb0", "xdpb0p")
	require.NoError(t, err)
	inNS(t, ns, p, func() error { return p.Gather(&testutil.Accumulator{}) })
	newID, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotEqual(t, oldID, newID, "the changed file swapped in")
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 5, 0}, banFlow{"198.51.100.1", 2, 0}, banFlow{"10.1.1.1", 3, 3})
	sendOn(t, ns, "xdpb0", peerB, banFlow{"203.0.113.5", 4, 0}, banFlow{"10.1.1.1", 2, 2})
	l.AddDecision("10.2.2.2", time.Hour)
	waitBans(t, ns, p, "a ban added after the change", func(f map[string]any) bool { return field(f, FieldActive) == 2 })
	sendBanFlows(t, ns, banFlow{"10.2.2.2", 3, 0})
}

// TestBansAllowFileChanged: a changed allow_prefix_file is read at the next
// gather and its prefixes put in force: a source it no longer allows is
// dropped by the ban, one it now allows passes; a file that turns bad
// keeps the prefixes read before, and says so once; so does one that
// allows a whole family.
func TestBansAllowFileChanged(t *testing.T) {
	l := lapi.Start(t)
	key := l.AddBouncer("xdp-drop-test")
	l.AddDecision("203.0.113.0/24", time.Hour)
	ns := testns.New(t)
	allow := t.TempDir() + "/allow.txt"
	writeList(t, allow, "203.0.113.128/25")
	p := banPlugin(l, key, &BansConfig{AllowPrefixFile: []string{allow}})
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitBans(t, ns, p, "the startup pull in force", func(f map[string]any) bool { return field(f, FieldActive) == 1 })
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 3, 0}, banFlow{"203.0.113.200", 4, 4})

	writeList(t, allow, "203.0.113.0/26")
	inNS(t, ns, p, func() error { return p.Gather(&testutil.Accumulator{}) })
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 3, 3}, banFlow{"203.0.113.200", 4, 0})

	writeList(t, allow, "203.0.113.0/26", "not-a-prefix")
	var errs []error
	for range 2 {
		acc := &testutil.Accumulator{}
		inNS(t, ns, p, func() error { return p.Gather(acc) })
		errs = append(errs, acc.Errors...)
	}
	require.Len(t, errs, 1, "the bad file reported once: %v", errs)
	require.ErrorContains(t, errs[0], `bans.allow_prefix_file: `+allow+`:2: "not-a-prefix" is not an address prefix or address`)
	require.ErrorContains(t, errs[0], "the allowed prefixes read before stay in force")
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 3, 3}, banFlow{"203.0.113.200", 4, 0})

	// A whole family allowed would turn the bans off: refused as a bad line.
	writeList(t, allow, "0.0.0.0/0")
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], `bans.allow_prefix_file: `+allow+`:1: "0.0.0.0/0" allows a whole address family, so no ban of it would ever drop`)
	sendBanFlows(t, ns, banFlow{"203.0.113.5", 3, 3}, banFlow{"203.0.113.200", 4, 0})
}
