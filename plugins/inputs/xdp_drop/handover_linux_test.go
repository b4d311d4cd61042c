//go:build linux

package xdp_drop

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// offerForeign offers fds for the test's Dev from a holder in this process,
// as a stopped instance's holder would, and returns the holder's
// directory. The holder is stopped when the test ends.
func offerForeign(t *testing.T, ns *testns.NS, fds []int) string {
	t.Helper()
	var netns uint64
	require.NoError(t, ns.Do(func() (err error) { netns, err = handover.CurrentNetNS(); return err }))
	return hold(t, []handover.Offer{{
		Header: handover.Header{Key: handover.Key{NetNS: netns, Ifindex: ns.DevIdx}, Interface: testns.Dev, Mode: "native"},
		FDs:    fds,
	}})
}

// hold starts a holder in this process that offers offers, as a stopped
// instance's holder process would, and returns its directory. The holder
// is stopped when the test ends.
func hold(t *testing.T, offers []handover.Offer) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "handover")
	h, errs := handover.NewHolder(dir, time.Minute, offers, testutil.Logger{})
	for _, err := range errs {
		require.NoError(t, err)
	}
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { h.Wait(stop); close(done) }()
	t.Cleanup(func() { stop <- syscall.SIGTERM; <-done })
	return dir
}

func dupAll(t *testing.T, fds ...int) []int {
	t.Helper()
	out := make([]int, len(fds))
	for i, fd := range fds {
		d, err := unix.Dup(fd)
		require.NoError(t, err)
		out[i] = d
	}
	return out
}

// TestHandoverForeignDescriptors: a successor offered descriptors that are
// not an xdp_drop XDP link on the interface it manages ignores them, says
// so, and attaches afresh.
func TestHandoverForeignDescriptors(t *testing.T) {
	t.Run("not BPF objects", func(t *testing.T) {
		ns := testns.New(t)
		var fds [2]int
		require.NoError(t, unix.Pipe(fds[:]))
		null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
		require.NoError(t, err)
		dir := offerForeign(t, ns, []int{fds[0], fds[1], null})
		successorIgnores(t, ns, dir, "not an xdp_drop attachment of this interface")
	})
	t.Run("xdp_drop link on another interface", func(t *testing.T) {
		ns := testns.New(t)
		prog, err := bpf.Load(bpf.Policy{DropAll: true})
		require.NoError(t, err)
		defer prog.Close()
		require.NoError(t, ns.Attach(testns.Peer, func() error { return prog.Attach(ns.PeerIdx, bpf.ModeNative) }))
		l, p, m, err := prog.FDs()
		require.NoError(t, err)
		dir := offerForeign(t, ns, dupAll(t, l, p, m))
		got := successorIgnores(t, ns, dir, "is on interface index")
		require.NotEqual(t, uint32(prog.ID()), got, "the foreign program is not taken")
	})
	t.Run("counters of another program", func(t *testing.T) {
		ns := testns.New(t)
		prog, err := bpf.Load(bpf.Policy{DropAll: true})
		require.NoError(t, err)
		defer prog.Close()
		other, err := bpf.Load(bpf.Policy{DropAll: true})
		require.NoError(t, err)
		defer other.Close()
		require.NoError(t, ns.Attach(testns.Dev, func() error { return prog.Attach(ns.DevIdx, bpf.ModeNative) }))
		require.NoError(t, ns.Attach(testns.Peer, func() error { return other.Attach(ns.PeerIdx, bpf.ModeNative) }))
		l, p, _, err := prog.FDs()
		require.NoError(t, err)
		_, _, m, err := other.FDs()
		require.NoError(t, err)
		dir := offerForeign(t, ns, dupAll(t, l, p, m))

		log := &testutil.CaptureLogger{}
		x := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Log: log})
		require.NoError(t, x.Init())
		x.links.handoff.dir = dir
		acc := &testutil.Accumulator{}
		inNS(t, ns, x, func() error { return x.Start(acc) })
		t.Cleanup(func() { inNS(t, ns, x, func() error { x.Stop(); return nil }) })
		require.Contains(t, strings.Join(log.Warnings(), "\n"), "does not use the handed-over counters")
		require.Equal(t, 1, ignoredOffers(log), "the refused offer is tried once, not load after load")
		// The program in the way is an xdp_drop one nobody handed over: left alone.
		require.Len(t, acc.Errors, 1)
		require.ErrorContains(t, acc.Errors[0], fmt.Sprintf("already has XDP program id %d", prog.ID()))
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, uint32(prog.ID()), id)
	})
}

// successorIgnores starts a plugin on Dev with the handover directory dir
// and checks that it logs why it ignored the offer and attached its own
// program; it returns that program's id.
func successorIgnores(t *testing.T, ns *testns.NS, dir, why string) uint32 {
	t.Helper()
	log := &testutil.CaptureLogger{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Log: log})
	require.NoError(t, p.Init())
	p.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, p, func() error { p.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	var warned bool
	for _, w := range log.Warnings() {
		if strings.Contains(w, "ignored what the handover offered") && strings.Contains(w, why) {
			warned = true
		}
	}
	require.True(t, warned, "warnings: %v", log.Warnings())
	require.Equal(t, 1, ignoredOffers(log), "the refused offer is tried once, not load after load")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id)
	require.Equal(t, id, uint32(p.links.ifaces[0].prog.ID()), "attached its own program")
	return id
}

// ignoredOffers counts the warnings that an offer was ignored.
func ignoredOffers(log *testutil.CaptureLogger) int {
	n := 0
	for _, w := range log.Warnings() {
		if strings.Contains(w, "ignored what the handover offered") {
			n++
		}
	}
	return n
}

// TestHandoverGenericUnderAuto: a successor with mode = "auto" keeps a
// handed-over link in generic mode (a link keeps its mode) and says so
// without guessing why the earlier run attached in generic mode: here it
// was configured to, nothing fell back.
func TestHandoverGenericUnderAuto(t *testing.T) {
	ns := testns.New(t)
	prog, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer prog.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return prog.Attach(ns.DevIdx, bpf.ModeGeneric) }))
	l, p, m, err := prog.FDs()
	require.NoError(t, err)
	var netns uint64
	require.NoError(t, ns.Do(func() (err error) { netns, err = handover.CurrentNetNS(); return err }))
	dir := hold(t, []handover.Offer{{
		Header: handover.Header{Key: handover.Key{NetNS: netns, Ifindex: ns.DevIdx}, Interface: testns.Dev,
			Mode: string(bpf.ModeGeneric), Fingerprint: prog.Fingerprint(), ProgramID: uint32(prog.ID())},
		FDs: dupAll(t, l, p, m),
	}})
	require.NoError(t, prog.Close(), "only the holder has the link now")

	log := &testutil.CaptureLogger{}
	x := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Mode: "auto", Drop: []any{"all"}, Log: log})
	require.NoError(t, x.Init())
	x.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, x, func() error { return x.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, x, func() error { x.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	require.Equal(t, bpf.ModeGeneric, x.links.ifaces[0].prog.Mode())
	warnings := strings.Join(log.Warnings(), "\n")
	require.Contains(t, warnings, `mode = "auto" fell back to generic mode (slower): the handed-over attachment is in generic mode`)
	require.NotContains(t, warnings, "an earlier run fell back to it", "nothing fell back: the earlier run was configured so")
	gathered := &testutil.Accumulator{}
	inNS(t, ns, x, func() error { return x.Gather(gathered) })
	fallback, ok := gathered.BoolField("xdp_drop_link", "fallback")
	require.True(t, ok)
	require.True(t, fallback, "auto runs the interface in generic mode")
}

// TestHandoverSilentHolder: a handover process that takes the request and
// never answers (running, not stopped) is waited for within Start's 2 s and
// a gather's 250 ms, not more; the error names it, and the interface it
// holds is left alone.
func TestHandoverSilentHolder(t *testing.T) {
	ns := testns.New(t)
	prog, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer prog.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return prog.Attach(ns.DevIdx, bpf.ModeNative) }))
	var netns uint64
	require.NoError(t, ns.Do(func() (err error) { netns, err = handover.CurrentNetNS(); return err }))
	dir := filepath.Join(t.TempDir(), "handover")
	require.NoError(t, handover.Prepare(dir))
	// Where a holder offers Dev: accepted, never answered.
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, fmt.Sprintf("%d-%d", netns, ns.DevIdx)), Net: "unixpacket"})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		var held []*net.UnixConn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()

	x := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, x.Init())
	x.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	began := time.Now()
	inNS(t, ns, x, func() error { return x.Start(acc) })
	start := time.Since(began)
	t.Cleanup(func() { inNS(t, ns, x, func() error { x.Stop(); return nil }) })
	want := fmt.Sprintf("interface %q: interface already has XDP program id %d (xdp_drop); handover process %d, which holds it for a stopped instance, did not answer within ", testns.Dev, prog.ID(), os.Getpid())
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], want)

	gathered := &testutil.Accumulator{}
	began = time.Now()
	inNS(t, ns, x, func() error { return x.Gather(gathered) })
	gather := time.Since(began)
	t.Logf("Start %v, Gather %v", start, gather)
	msg, ok := gathered.StringField("xdp_drop_link", "error")
	require.True(t, ok)
	require.Contains(t, msg, want)
	// The waits it chose, which the errors name: the start's within its
	// 2 s, the gather's within its 250 ms (what is left of them when asked).
	require.LessOrEqual(t, waitNamed(t, acc.Errors[0].Error(), want), startWait)
	require.LessOrEqual(t, waitNamed(t, msg, want), gatherWait)
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(prog.ID()), id, "left alone")
}

// waitNamed is the wait an error names after want: "... did not answer
// within 249ms: ...".
func waitNamed(t *testing.T, msg, want string) time.Duration {
	t.Helper()
	_, rest, ok := strings.Cut(msg, want)
	require.True(t, ok, "%q lacks %q", msg, want)
	waited, _, _ := strings.Cut(rest, ":")
	d, err := time.ParseDuration(waited)
	require.NoError(t, err, "the wait %q names", msg)
	return d
}
