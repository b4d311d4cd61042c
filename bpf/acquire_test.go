//go:build linux

package bpf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestAcquireRoutes: Acquire attaches a fresh program and says so; given
// what that program's instance hands over, a successor instance of the same
// policy takes it over in place, keeps the program and its counters,
// answers the handover, and says so; with another policy it swaps a new
// program into the same link. The programs of one instance share their
// rule maps, those of two instances do not.
func TestAcquireRoutes(t *testing.T) {
	ns := testns.New(t)
	policy := bpf.Policy{Protocols: []uint8{17}, Rules: []bpf.Rule{{Name: "dns", Protocols: []uint8{17}, DstPorts: []bpf.PortRange{{Lo: 53, Hi: 53}}}}}
	first := bpf.NewInstance(policy)
	defer first.Close()
	var got bpf.Got
	require.NoError(t, ns.Attach(testns.Dev, func() (err error) {
		got, err = first.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative})
		return err
	}))
	p := got.Program
	require.Equal(t, bpf.RouteFresh, got.Route)
	require.False(t, got.Continued)
	require.Equal(t, []bpf.Note{{Text: fmt.Sprintf("attached in native mode, program id %d", p.ID())}}, got.Notes)

	// What a stopping instance hands over: copies of its descriptors.
	handOver := func(p *bpf.Program) (*bpf.Handed, *string) {
		fds, err := p.Handed()
		require.NoError(t, err)
		require.Len(t, fds, 4, "link, program, counters, rule counters")
		dups := make([]int, len(fds))
		for i, fd := range fds {
			dups[i], err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			require.NoError(t, err)
		}
		h := bpf.HandedFrom(dups)
		h.Fingerprint, h.ProgramID = p.Fingerprint(), p.ID()
		answer := new(string)
		h.Settle = func(accept bool, refusal string) {
			*answer = "refused: " + refusal
			if accept {
				*answer = "accepted"
			}
		}
		return h, answer
	}

	second := bpf.NewInstance(policy)
	defer second.Close()
	h, answer := handOver(p)
	require.NoError(t, ns.Attach(testns.Dev, func() (err error) {
		got, err = second.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative, Handed: h})
		return err
	}))
	require.Equal(t, "accepted", *answer)
	require.Equal(t, bpf.RouteHandedOver, got.Route)
	require.True(t, got.Continued)
	require.Equal(t, p.ID(), got.Program.ID(), "the same program, kept")
	require.Contains(t, got.Notes[0].Text, "counters continue")
	require.NoError(t, p.Close()) // the stopping instance lets its copies go
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(got.Program.ID()), id, "still attached, by the successor's link")

	changed := policy
	changed.Rules = []bpf.Rule{{Name: "dns", Protocols: []uint8{17}, DstPorts: []bpf.PortRange{{Lo: 54, Hi: 54}}}}
	third := bpf.NewInstance(changed)
	defer third.Close()
	kept := got.Program
	h, answer = handOver(kept)
	require.NoError(t, ns.Attach(testns.Dev, func() (err error) {
		got, err = third.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative, Handed: h})
		return err
	}))
	defer got.Program.Close()
	require.Equal(t, "accepted", *answer)
	require.Equal(t, bpf.RouteHandedOver, got.Route)
	require.False(t, got.Continued)
	require.NotEqual(t, kept.ID(), got.Program.ID(), "a program of the new rules")
	require.True(t, strings.HasPrefix(got.Notes[0].Text, "taken over in place"), "%q", got.Notes[0].Text)
	require.NoError(t, kept.Close())
	id, err = ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(got.Program.ID()), id, "swapped into the same link: never detached")
}
