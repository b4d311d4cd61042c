//go:build linux

package xdp_drop

import (
	"sort"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// linkStates maps each interface in the gather's xdp_drop_link points to
// whether it is attached.
func linkStates(acc *testutil.Accumulator) map[string]bool {
	out := map[string]bool{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == "xdp_drop_link" {
			iface, _ := m.GetTag("interface")
			a, _ := m.GetField("attached")
			out[iface] = a == true
		}
	}
	return out
}

func attachedSet(t *testing.T, ns *testns.NS, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		if _, err := ns.Netlink().LinkByName(n); err != nil {
			continue // not (or no longer) there
		}
		id, err := ns.XDPProgramID(n)
		require.NoError(t, err)
		if id != 0 {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// TestGlobSelection: patterns attach the interfaces they match less the
// excluded ones, never loopback, pick up an interface created after start,
// and release one that vanishes after reporting it.
func TestGlobSelection(t *testing.T) {
	ns := testns.New(t)
	for _, pair := range [][2]string{{"xdpg0", "xdph0"}, {"xdpg1", "xdph1"}} {
		_, _, err := ns.AddVeth(pair[0], pair[1])
		require.NoError(t, err)
	}
	all := []string{"lo", testns.Dev, testns.Peer, "xdpg0", "xdph0", "xdpg1", "xdph1", "xdpg2", "xdph2"}
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpg*", testns.Dev}, InterfaceExclude: []string{"xdpg1"}, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	// Every device in the namespace but lo is this test's: check they all are.
	inNS(t, ns, withDefaults(&XDPDrop{Interfaces: all[1:7]}), func() error { return nil })
	inNS(t, ns, p, func() error { return p.Start(acc) })
	defer inNS(t, ns, p, func() error { p.Stop(); return nil })
	require.Empty(t, acc.Errors)
	require.Equal(t, []string{"xdpg0", testns.Dev}, attachedSet(t, ns, all...))

	_, _, err := ns.AddVeth("xdpg2", "xdph2")
	require.NoError(t, err)
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	require.Equal(t, map[string]bool{testns.Dev: true, "xdpg0": true, "xdpg2": true}, linkStates(acc))
	require.Equal(t, []string{"xdpg0", "xdpg2", testns.Dev}, attachedSet(t, ns, all...))

	require.NoError(t, ns.DelLink("xdpg2"))
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Equal(t, map[string]bool{testns.Dev: true, "xdpg0": true, "xdpg2": false}, linkStates(acc), "reported once")
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Equal(t, map[string]bool{testns.Dev: true, "xdpg0": true}, linkStates(acc), "then released")
	require.Empty(t, acc.Errors)
}

func TestGlobNeverLoopback(t *testing.T) {
	ns := testns.New(t)
	p := withDefaults(&XDPDrop{Interfaces: []string{"*"}, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	inNS(t, ns, withDefaults(&XDPDrop{Interfaces: []string{testns.Dev, testns.Peer}}), func() error { return nil })
	inNS(t, ns, p, func() error { return p.Start(acc) })
	defer inNS(t, ns, p, func() error { p.Stop(); return nil })
	require.Equal(t, []string{testns.Dev, testns.Peer}, attachedSet(t, ns, "lo", testns.Dev, testns.Peer))
	// Not even tried: lo, which has no native XDP, would show as not attached.
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Equal(t, map[string]bool{testns.Dev: true, testns.Peer: true}, linkStates(acc))
	require.Empty(t, acc.Errors)
}

// TestNamespaceOption: the plugin runs in the test process's own namespace
// and attaches inside the namespace it is told to use.
func TestNamespaceOption(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	for _, name := range []string{ns.Name, ns.Path} {
		p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Namespace: name, Drop: []any{"udp"}, Log: testutil.Logger{}})
		require.NoError(t, p.Init())
		acc := &testutil.Accumulator{}
		require.NoError(t, p.Start(acc))
		require.Empty(t, acc.Errors)
		id, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, uint32(p.links.ifaces[0].prog.ID()), id)

		mix := traffic.Mix()
		send(t, ns, mix)
		acc = gatherUntil(t, ns, p, uint64(traffic.Total(mix)))
		require.Equal(t, uint64(traffic.Total(mix)), packetsOf(acc, testns.Dev))
		p.Stop()
		id, err = ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Zero(t, id)
	}

	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Namespace: "xdpdrop-no-such-ns", Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	require.NoError(t, p.Start(acc))
	require.Len(t, acc.Errors, 1)
	require.Contains(t, acc.Errors[0].Error(), `namespace = "xdpdrop-no-such-ns"`)
	acc = &testutil.Accumulator{}
	require.NoError(t, p.Gather(acc))
	require.Empty(t, acc.Errors, "reported once")
	require.Equal(t, map[string]bool{testns.Dev: false}, linkStates(acc))
}

// TestNamespaceDestroyed: when the namespace goes away with its veths while
// attached, the plugin cannot enter it any more, yet still notices that its
// program was detached and reports the interface as not attached.
func TestNamespaceDestroyed(t *testing.T) {
	testns.RequirePrivileged(t)
	ns, err := testns.Create(testns.Prefix())
	require.NoError(t, err)
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			ns.Delete()
		}
	})
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Namespace: ns.Name, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	require.NoError(t, p.Start(acc))
	defer p.Stop()
	require.Empty(t, acc.Errors)
	require.NotNil(t, p.links.ifaces[0].prog)

	require.NoError(t, ns.Delete())
	deleted = true
	// The kernel tears the namespace down asynchronously.
	deadline := time.Now().Add(testns.Hang)
	for {
		acc = &testutil.Accumulator{}
		require.NoError(t, p.Gather(acc))
		if !linkStates(acc)[testns.Dev] || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, map[string]bool{testns.Dev: false}, linkStates(acc))
	require.Nil(t, p.links.ifaces[0].prog, "the detached program is released")
	require.NotEmpty(t, acc.Errors)
	require.Contains(t, acc.Errors[0].Error(), "namespace")
}
