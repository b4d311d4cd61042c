//go:build linux

package bpf_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// handOver attaches a program of policy to the test veth through an
// instance, runs n DNS frames from one source through it, and hands it
// over, as a stopping instance does, to a successor of next: the
// successor's program and whether it continued the first.
func handOver(t *testing.T, policy, next bpf.Policy, n int) (*bpf.Program, bool) {
	ns := testns.New(t)
	first := bpf.NewInstance(policy)
	t.Cleanup(func() { first.Close() })
	var got bpf.Got
	require.NoError(t, ns.Attach(testns.Dev, func() (err error) {
		got, err = first.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative})
		return err
	}))
	p := got.Program
	frame := dnsFrom("198.51.100.1")
	c := &limitClock{t: t, p: p}
	passed, _ := c.send(frame, n)
	require.Equal(t, min(n, 3), passed)
	fds, err := p.Handed()
	require.NoError(t, err)
	dups := make([]int, len(fds))
	for i, fd := range fds {
		dups[i], err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		require.NoError(t, err)
	}
	h := bpf.HandedFrom(dups)
	h.Fingerprint, h.ProgramID = p.Fingerprint(), p.ID()
	second := bpf.NewInstance(next)
	t.Cleanup(func() { second.Close() })
	require.NoError(t, ns.Attach(testns.Dev, func() (err error) {
		got, err = second.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative, Handed: h})
		return err
	}))
	require.NoError(t, p.Close(), "the stopping instance lets its copies go")
	t.Cleanup(func() { got.Program.Close() })
	return got.Program, got.Continued
}

// TestLimitHandover: a successor with the same limit rules continues the
// program, and with it the budgets spent and the over-budget counts; one
// whose budget changed starts afresh, with full bursts.
func TestLimitHandover(t *testing.T) {
	lim := bpf.Limit{Rate: 1, Burst: 3, PrefixV4: 32, PrefixV6: 64}
	policy := bpf.Policy{Rules: []bpf.Rule{limitRule(lim)}}
	frame := dnsFrom("198.51.100.1")

	t.Run("same rules", func(t *testing.T) {
		q, continued := handOver(t, policy, policy, 4)
		require.True(t, continued)
		c := &limitClock{t: t, p: q}
		passed, dropped := c.send(frame, 2)
		require.Equal(t, [2]int{0, 2}, [2]int{passed, dropped}, "the budget spent before the handover stays spent")
		var b bpf.Block
		require.NoError(t, q.ReadBlock(&b))
		require.Equal(t, [2]uint64{6, 3}, [2]uint64{b.Rule[0].Packets, b.Limited[0].Packets}, "decided and over budget, before and after")
	})
	t.Run("budget changed", func(t *testing.T) {
		next := lim
		next.Burst = 4
		q, continued := handOver(t, policy, bpf.Policy{Rules: []bpf.Rule{limitRule(next)}}, 4)
		require.False(t, continued)
		c := &limitClock{t: t, p: q}
		passed, dropped := c.send(frame, 5)
		require.Equal(t, [2]int{4, 1}, [2]int{passed, dropped}, "a new budget starts full")
	})
}

// TestLimitObserved: a read-only view of a running program with limit
// rules (the -watch of another instance) accepts the same config, whose
// budgets are constants the view can compare (the seed is in the map), and
// reads the frames over budget.
func TestLimitObserved(t *testing.T) {
	ns := testns.New(t)
	policy := bpf.Policy{Rules: []bpf.Rule{limitRule(bpf.Limit{Rate: 1, Burst: 2, PrefixV4: 32, PrefixV6: 64})}}
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }))
	c := &limitClock{t: t, p: p}
	passed, dropped := c.send(dnsFrom("198.51.100.1"), 5)
	require.Equal(t, [2]int{2, 3}, [2]int{passed, dropped})

	var o *bpf.Program
	require.NoError(t, ns.Do(func() (err error) { o, _, err = bpf.Observe(ns.DevIdx, policy); return err }))
	t.Cleanup(func() { o.Close() })
	var b bpf.Block
	require.NoError(t, o.ReadBlock(&b))
	require.Equal(t, [2]uint64{5, 3}, [2]uint64{b.Rule[0].Packets, b.Limited[0].Packets})

	other := bpf.Policy{Rules: []bpf.Rule{limitRule(bpf.Limit{Rate: 2, Burst: 2, PrefixV4: 32, PrefixV6: 64})}}
	err = ns.Do(func() error { _, _, err := bpf.Observe(ns.DevIdx, other); return err })
	var mismatch *bpf.PolicyMismatchError
	require.ErrorAs(t, err, &mismatch, "another budget is another config")
	require.Contains(t, mismatch.Constants, "limit_params")
	require.NotContains(t, err.Error(), "per_queue", "the plugin words the advice")
}

// TestLimitSwapRules: a prefix file's change swaps the program, on the
// budgets it had: what a source spent before the swap stays spent, the new
// prefix has a budget of its own, and a swap may not change a budget.
func TestLimitSwapRules(t *testing.T) {
	policy := func(list ...string) bpf.Policy {
		r := limitRule(bpf.Limit{Rate: 1, Burst: 3, PrefixV4: 32, PrefixV6: 64})
		r.SrcPrefixes, r.PrefixFiles = prefixes(list...), []string{"src /lists/limited.txt"}
		return bpf.Policy{Rules: []bpf.Rule{r}}
	}
	ns := testns.New(t)
	// The limiter's clock stands still (SetLimitClock): a swap slower than
	// the rate's second on a loaded machine must not refill the budget.
	defer bpf.UseLimitClock()()
	p, err := bpf.Load(policy("198.51.100.0/24"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c := &limitClock{t: t, p: p}
	c.advance(time.Hour)
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }))
	frame := dnsFrom("198.51.100.1")
	passed, _ := c.send(frame, 2)
	require.Equal(t, 2, passed)

	r, err := bpf.CompileRules(policy("198.51.100.0/24", "203.0.113.0/24"))
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, p.SwapRules(r))
	c.advance(0) // the swapped program's clock, at the same time
	passed, dropped := c.send(frame, 3)
	require.Equal(t, [2]int{1, 2}, [2]int{passed, dropped}, "the budget spent before the swap stays spent")
	passed, dropped = c.send(dnsFrom("203.0.113.9"), 4)
	require.Equal(t, [2]int{3, 1}, [2]int{passed, dropped}, "the new prefix is in force, with a budget of its own")

	changed := policy("198.51.100.0/24")
	changed.Rules[0].Limit.Burst = 4
	cr, err := bpf.CompileRules(changed)
	require.NoError(t, err)
	defer cr.Close()
	require.ErrorContains(t, p.SwapRules(cr), "differs in more than its prefixes")
}

// TestLimitHandedRules: the limiter's cells are handed over with the rule
// maps, once for the instance: a successor with the same rules adopts
// them, and a program it attaches afresh, on another interface, finds the
// budgets the stopped instance's programs spent.
func TestLimitHandedRules(t *testing.T) {
	ns := testns.New(t)
	otherIdx, _, err := ns.AddVeth("xdph0", "xdph1")
	require.NoError(t, err)
	policy := bpf.Policy{Rules: []bpf.Rule{limitRule(bpf.Limit{Rate: 1, Burst: 3, PrefixV4: 32, PrefixV6: 64})}}
	first := bpf.NewInstance(policy)
	t.Cleanup(func() { first.Close() })
	var got bpf.Got
	require.NoError(t, ns.Attach(testns.Dev, func() (err error) {
		got, err = first.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative})
		return err
	}))
	t.Cleanup(func() { got.Program.Close() })
	frame := dnsFrom("198.51.100.1")
	passed, _ := (&limitClock{t: t, p: got.Program}).send(frame, 2)
	require.Equal(t, 2, passed)

	fds, describe := first.RuleMapsToHand()
	require.Len(t, fds, 6, "five rule maps and the limiter's cells")
	dups := make([]int, len(fds))
	for i, fd := range fds {
		dups[i], err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		require.NoError(t, err)
	}
	second := bpf.NewInstance(policy)
	t.Cleanup(func() { second.Close() })
	adopted, why := second.AdoptRules(bpf.RulesHandedFrom(dups, describe))
	require.True(t, adopted, why)
	var fresh bpf.Got
	require.NoError(t, ns.Attach("xdph0", func() (err error) {
		fresh, err = second.Acquire(bpf.Want{Ifindex: otherIdx, Name: "xdph0", Mode: bpf.ModeNative})
		return err
	}))
	t.Cleanup(func() { fresh.Program.Close() })
	passed, dropped := (&limitClock{t: t, p: fresh.Program}).send(frame, 3)
	require.Equal(t, [2]int{1, 2}, [2]int{passed, dropped}, "the budget the first instance spent stays spent")
}
