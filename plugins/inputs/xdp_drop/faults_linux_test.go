//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

func linkPoint(t *testing.T, acc *testutil.Accumulator, iface string) map[string]any {
	t.Helper()
	for _, m := range acc.GetTelegrafMetrics() {
		if v, _ := m.GetTag("interface"); m.Name() == "xdp_drop_link" && v == iface {
			return m.Fields()
		}
	}
	t.Fatalf("no xdp_drop_link point for %s", iface)
	return nil
}

func packetsOf(acc *testutil.Accumulator, iface string) uint64 {
	var total uint64
	for _, m := range acc.GetTelegrafMetrics() {
		if v, _ := m.GetTag("interface"); m.Name() == "xdp_drop" && v == iface {
			p, _ := m.GetField("packets")
			total += p.(uint64)
		}
	}
	return total
}

// TestInterfaceDeletedAndRecreated: a deleted interface is reported as not
// attached with an error, once; the other keeps reporting; recreated with the
// same name it is attached again at the next gather, with a new program id
// and counters from zero.
func TestInterfaceDeletedAndRecreated(t *testing.T) {
	ns := testns.New(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev, "xdpt2"}, Drop: []any{"all"}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)

	mix := traffic.Mix()
	send(t, ns, mix)
	acc = gatherUntil(t, ns, p, uint64(traffic.Total(mix)))
	oldID := linkPoint(t, acc, "xdpt2")["program_id"]
	require.NotNil(t, oldID)

	require.NoError(t, ns.DelLink("xdpt2"))
	for i := 0; i < 3; i++ {
		acc = &testutil.Accumulator{}
		inNS(t, ns, p, func() error { return p.Gather(acc) })
		if i == 0 {
			require.Len(t, acc.Errors, 1, "the loss is reported once")
			require.Contains(t, acc.Errors[0].Error(), `interface "xdpt2" not found`)
		} else {
			require.Empty(t, acc.Errors, "no error storm while it stays away")
		}
		f := linkPoint(t, acc, "xdpt2")
		require.Equal(t, false, f["attached"])
		require.Contains(t, f["error"], "not found")
		require.NotContains(t, f, "program_id")
		require.Equal(t, true, linkPoint(t, acc, testns.Dev)["attached"], "the other interface keeps working")
		require.Equal(t, uint64(traffic.Total(mix)), packetsOf(acc, testns.Dev), "and keeps its counters")
	}

	_, _, err = ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	f := linkPoint(t, acc, "xdpt2")
	require.Equal(t, true, f["attached"])
	require.NotEqual(t, oldID, f["program_id"], "a new program, so the counter reset is visible")
	require.Zero(t, packetsOf(acc, "xdpt2"), "counters start from zero")
	id, err := ns.XDPProgramID("xdpt2")
	require.NoError(t, err)
	require.Equal(t, f["program_id"], int64(id))
}

// TestLinkDetachedFromOutside: when another tool detaches the plugin's link
// (bpftool link detach) the interface is still there; the plugin says so
// and attaches again at the next gather.
func TestLinkDetachedFromOutside(t *testing.T) {
	ns := testns.New(t)
	log := &captureLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Log: log})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	oldID := p.links.ifaces[0].prog.ID()

	require.NoError(t, detachLink(oldID))
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "detached from outside")

	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	require.Contains(t, strings.Join(log.warnings, "\n"), "detached by another tool")
	f := linkPoint(t, acc, testns.Dev)
	require.Equal(t, true, f["attached"])
	require.NotEqual(t, int64(oldID), f["program_id"])
}

// TestInterfaceRecreatedBetweenGathers: deleted and created again before the
// next gather, the interface is not mistaken for one whose link another
// tool detached; it is attached again with a new program.
func TestInterfaceRecreatedBetweenGathers(t *testing.T) {
	ns := testns.New(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	log := &captureLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpt2"}, Drop: []any{"all"}, Log: log})
	startPlugin(t, ns, p)
	oldID := p.links.ifaces[0].prog.ID()

	require.NoError(t, ns.DelLink("xdpt2"))
	_, _, err = ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	warnings := strings.Join(log.warnings, "\n")
	require.Contains(t, warnings, "interface was removed")
	require.NotContains(t, warnings, "another tool")
	f := linkPoint(t, acc, "xdpt2")
	require.Equal(t, true, f["attached"])
	require.NotEqual(t, int64(oldID), f["program_id"])
}

// TestErrorFieldKeepsFirstLine: a verifier log would flood the error field
// of xdp_drop_link; the field keeps its first line and points at the log.
// Another multi-line error (errors joined) is not called a verifier log.
func TestErrorFieldKeepsFirstLine(t *testing.T) {
	require.Equal(t, `interface "eth1" not found`, firstLine(errors.New(`interface "eth1" not found`)))
	require.Equal(t, "load XDP program: invalid argument (verifier log in Telegraf's log)",
		firstLine(verifierRefusal{err: &ebpf.VerifierError{Cause: unix.EINVAL, Log: []string{"0: R1=ctx()", "processed 3 insns"}}}))
	require.Equal(t, `enter namespace "x": operation not permitted (the rest in Telegraf's log)`,
		firstLine(errors.Join(errors.New(`enter namespace "x": operation not permitted`), errors.New("could not return the thread to its network namespace"))))
}

// verifierRefusal is shaped as the bpf package's load error: the whole log
// in its text, a *ebpf.VerifierError to errors.As.
type verifierRefusal struct{ err *ebpf.VerifierError }

func (e verifierRefusal) Error() string {
	return "load XDP program: invalid argument\n0: R1=ctx()\nprocessed 3 insns"
}
func (e verifierRefusal) Unwrap() error { return e.err }

// detachLink detaches the XDP link of program id, as bpftool link detach does.
func detachLink(id ebpf.ProgramID) error {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err == nil && info.Type == link.XDPType && info.Program == id {
			l := it.Take()
			defer l.Close()
			return l.Detach()
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return fmt.Errorf("no XDP link of program %d", id)
}
