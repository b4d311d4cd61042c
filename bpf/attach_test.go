//go:build linux

package bpf_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// TestAttachRealTraffic attaches to a veth in a fresh namespace, sends a mix
// from the peer and checks exact counts per class, that dropped frames never
// reach the stack and passed ones all do.
func TestAttachRealTraffic(t *testing.T) {
	for _, mode := range []bpf.Mode{bpf.ModeNative, bpf.ModeGeneric} {
		t.Run(string(mode), func(t *testing.T) {
			ns := testns.New(t)
			if mode == bpf.ModeGeneric {
				require.NoError(t, ns.EnableGRO(testns.Dev))
			}
			gen, err := txgen.New()
			require.NoError(t, err)
			defer gen.Close()

			policy := bpf.Policy{Protocols: []uint8{17, 1, 47}}
			p, err := bpf.Load(policy)
			require.NoError(t, err)
			defer p.Close()
			require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, mode) }))
			require.Equal(t, mode, p.Mode())
			id, err := ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			require.Equal(t, uint32(p.ID()), id, "ip link shows our program")

			sock, err := ns.OpenPacketSocket(testns.Dev)
			require.NoError(t, err)
			defer sock.Close()
			rx0, err := ns.RxPackets(testns.Dev)
			require.NoError(t, err)

			mix := traffic.Mix()
			require.NoError(t, ns.Do(func() error { return gen.SendFlows(ns.PeerIdx, mix) }))

			want := traffic.Expected(mix)
			var got bpf.Counters
			require.NoError(t, waitCounters(p, &got, uint64(traffic.Total(mix))))
			for c := range want {
				require.Equal(t, want[c], got[c], "class %d", c)
			}
			if mode == bpf.ModeNative {
				// In generic mode the veth counts at the stack, after GRO, so
				// only native delivery is checked against the interface.
				rx1, err := ns.RxPackets(testns.Dev)
				require.NoError(t, err)
				require.Equal(t, uint64(traffic.Total(mix)), rx1-rx0, "frames delivered to %s", testns.Dev)
			}

			wantPassed := 0
			for _, f := range mix {
				if !policy.Drops(f.Class) {
					wantPassed += f.Count
				}
			}
			received, err := sock.Receive(wantPassed, testns.Hang)
			require.NoError(t, err)
			require.Equal(t, wantPassed, len(received), "frames that reached the stack")
			for _, r := range received {
				for _, f := range mix {
					if policy.Drops(f.Class) && bytes.Equal(r, f.Frame) {
						t.Fatalf("dropped flow %s reached the stack", f.Name)
					}
				}
			}

			require.NoError(t, p.Detach())
			id, err = ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			require.Zero(t, id, "detached")
		})
	}
}

// waitCounters polls until the counters total want packets, as the receiving
// NAPI runs after the sender's syscall returns.
func waitCounters(p *bpf.Program, c *bpf.Counters, want uint64) error {
	deadline := time.Now().Add(testns.Hang)
	for {
		if err := p.ReadCounters(c); err != nil {
			return err
		}
		var total uint64
		for _, v := range c {
			total += v.Packets
		}
		if total == want {
			return nil
		}
		if total > want || time.Now().After(deadline) {
			return fmt.Errorf("counted %d packets, sent %d", total, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAttachRefusesOutsideTestNamespace proves the guard every test attach
// goes through: the namespace the tests started in, and any interface that is
// not the test veth, are refused.
func TestAttachRefusesOutsideTestNamespace(t *testing.T) {
	ns := testns.New(t)
	err := testns.CheckNotInitial()
	require.Error(t, err, "this goroutine's thread is in the starting namespace")

	for _, name := range []string{"eth0", "lo", testns.Dev} {
		require.Error(t, ns.CheckAttachable(name), "outside the namespace: %s", name)
	}
	require.NoError(t, ns.Do(func() error {
		if err := ns.CheckAttachable("lo"); err == nil {
			return errors.New("lo in the test namespace was accepted")
		}
		if err := ns.CheckAttachable("eth0"); err == nil {
			return errors.New("eth0 was accepted")
		}
		return ns.CheckAttachable(testns.Dev)
	}))
}
