//go:build linux

package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// startConfigFile starts the binary with a config file that is already
// written: a successor of an instance runs the same file.
func startConfigFile(t *testing.T, ns *testns.NS, path string) *proc {
	t.Helper()
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	return runProc(t, ns.Exec(binary, "-config", path, "-poll_interval_disabled"))
}

// linkPoint returns the last gather's xdp_drop_link point of Dev: attached,
// program id and error.
func linkPoint(t *testing.T, ms []telegraf.Metric) (bool, int64, string) {
	t.Helper()
	for _, m := range ms {
		if iface, _ := m.GetTag("interface"); m.Name() != "xdp_drop_link" || iface != testns.Dev {
			continue
		}
		attached, _ := m.GetField("attached")
		id, _ := m.GetField("program_id")
		msg, _ := m.GetField("error")
		idv, _ := id.(int64)
		msgv, _ := msg.(string)
		return attached.(bool), idv, msgv
	}
	t.Fatalf("no xdp_drop_link point for %s", testns.Dev)
	return false, 0, ""
}

// TestHandoverHolderStopped: a successor whose predecessor's handover
// process is stopped (SIGSTOP) does not wait for it: its error says it found
// the process stopped, which is never waited for, names it and what to do. The
// stopped process still holds the interface, so nothing is attached in its
// place; once it runs again, the next gather takes the interface over.
func TestHandoverHolderStopped(t *testing.T) {
	ns := testns.New(t)
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))

	began := time.Now()
	a := startConfigFile(t, ns, conf)
	attached, id, _ := linkPoint(t, a.gather(t, testns.Dev))
	startA := time.Since(began)
	require.True(t, attached, "stderr: %s", a.stderr)
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t), "stderr: %s", a.stderr)
	pid := holderOf(t, a)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })

	began = time.Now()
	b := startConfigFile(t, ns, conf)
	attached, _, msg := linkPoint(t, b.gather(t, testns.Dev))
	startB := time.Since(began)
	require.False(t, attached, "the stopped process still holds the interface")
	require.Contains(t, msg, fmt.Sprintf("already has XDP program id %d (xdp_drop); handover process %d, which holds it for a stopped instance, is stopped (SIGSTOP): kill -CONT %d lets this instance take the interface over in place at the next gather, kill -KILL %d releases it at once", id, pid, pid, pid))
	// stderr is read apart from stdout: waited for, not read at once.
	waitLog(t, b, fmt.Sprintf("E! Error in plugin: interface %q: interface already has XDP program id %d (xdp_drop); handover process %d, ", testns.Dev, id, pid))
	var gathers []time.Duration
	for range 3 {
		began = time.Now()
		attached, _, _ = linkPoint(t, b.gather(t, testns.Dev))
		gathers = append(gathers, time.Since(began))
		require.False(t, attached)
	}
	t.Logf("first start %v; start with the handover process stopped %v; its gathers %v", startA, startB, gathers)
	require.Equal(t, 1, strings.Count(b.stderr.String(), "E! "), "reported once: %s", b.stderr)
	now, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(id), now, "held by the stopped process")

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	var got int64
	for deadline := time.Now().Add(testns.Hang); !attached && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		attached, got, _ = linkPoint(t, b.gather(t, testns.Dev))
	}
	require.True(t, attached, "taken over once the process runs again; stderr: %s", b.stderr)
	require.Equal(t, id, got)
	waitLog(t, b, fmt.Sprintf("I! interface %q: taken over in place, program id %d; counters continue", testns.Dev, id))
	waitGone(t, pid, testns.Hang)
}

// TestHandoverOnlyToSameInstance: a stopped instance's interface goes to
// the successor of that instance (the same config file, the same user),
// never to another running instance that also manages it: Q, whose
// pattern matches P's interface, does not take it while P's handover
// process holds it, and P's successor takes it over in place.
func TestHandoverOnlyToSameInstance(t *testing.T) {
	ns := testns.New(t)
	confP := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))
	confQ := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev+"*"))

	p := startConfigFile(t, ns, confP)
	attached, id, _ := linkPoint(t, p.gather(t, testns.Dev))
	require.True(t, attached, "stderr: %s", p.stderr)
	q := startConfigFile(t, ns, confQ)
	attached, _, _ = linkPoint(t, q.gather(t, testns.Dev))
	require.False(t, attached, "P runs: Q leaves its interface alone")

	require.NoError(t, p.stdin.Close())
	require.NoError(t, p.wait(t), "stderr: %s", p.stderr)
	pid := holderOf(t, p)
	for range 3 {
		attached, _, _ = linkPoint(t, q.gather(t, testns.Dev))
		require.False(t, attached, "Q took over P's interface; Q's stderr: %s", q.stderr)
		time.Sleep(50 * time.Millisecond)
	}
	now, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(id), now, "held for P's successor")

	p2 := startConfigFile(t, ns, confP)
	attached, got, _ := linkPoint(t, p2.gather(t, testns.Dev))
	require.True(t, attached, "P's successor takes it over; stderr: %s", p2.stderr)
	require.Equal(t, id, got)
	waitLog(t, p2, fmt.Sprintf("I! interface %q: taken over in place, program id %d; counters continue", testns.Dev, id))
	waitGone(t, pid, testns.Hang)
	attached, _, _ = linkPoint(t, q.gather(t, testns.Dev))
	require.False(t, attached)
	require.NotContains(t, q.stderr.String(), "taken over")
}

// TestHandoverHolderKilled: a handover process killed by SIGKILL leaves its
// sockets; the successor tells them from those of a process about to
// listen (no process holds their lock), says the process is gone, loads
// its own rule maps and attaches afresh, rather than asking again until its
// wait runs out while the interface goes unfiltered.
func TestHandoverHolderKilled(t *testing.T) {
	ns := testns.New(t)
	conf := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"icmp\"]\n"+
		"  [[inputs.xdp_drop.rule]]\n    name = \"block\"\n    action = \"drop\"\n    src_prefix = [\"192.0.2.0/24\"]\n", testns.Dev))

	a := startConfigFile(t, ns, conf)
	attached, id, _ := linkPoint(t, a.gather(t, testns.Dev))
	require.True(t, attached, "stderr: %s", a.stderr)
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t), "stderr: %s", a.stderr)
	pid := holderOf(t, a)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waitGone(t, pid, testns.Hang)
	_, err := ns.WaitNoXDP(testns.Dev, testns.Hang)
	require.NoError(t, err, "the kernel detaches what the killed process held")

	b := startConfigFile(t, ns, conf)
	attached, got, msg := linkPoint(t, b.gather(t, testns.Dev))
	require.True(t, attached, "error %q; stderr: %s", msg, b.stderr)
	require.NotEqual(t, id, got, "attached afresh")
	waitLog(t, b, "I! handover: the stopped instance's rule maps: the handover process that offered it is gone (it died, leaving its socket): nothing to take over; this instance loads its own")
	require.NotContains(t, b.stderr.String(), "E! ")
}
