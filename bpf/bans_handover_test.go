//go:build linux

package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// handOffAll returns copies of what in hands over, as a successor gets them.
func handOffAll(t *testing.T, in *Instance, want int) *HandedRules {
	t.Helper()
	fds, describe := in.RuleMapsToHand()
	require.Len(t, fds, want)
	dups := make([]int, len(fds))
	for i, fd := range fds {
		d, err := unix.Dup(fd)
		require.NoError(t, err)
		dups[i] = d
	}
	return RulesHandedFrom(dups, describe)
}

func banFrame(src string) []byte {
	l3 := frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), netip.MustParseAddr(src), netip.MustParseAddr("192.0.2.53"))
	return frames.Ether(frames.EtherIPv4, l3)
}

// runs runs frame n times through p and counts the frames passed.
func passed(t *testing.T, p *Program, frame []byte, n int) int {
	t.Helper()
	pass := 0
	for range n {
		v, err := p.objs.Prog.Run(&ebpf.RunOptions{Data: frame})
		require.NoError(t, err)
		if v == 2 {
			pass++
		}
	}
	return pass
}

// TestBansHandedOver: the ban maps go to the successor with the rule maps;
// its programs drop the banned sources from the start (0 passed), its
// table lists the bans handed over and counts them, and a lift through it
// reaches the stopping instance's program too, which runs on the same
// maps. With another max the maps are not adopted, and it says why.
func TestBansHandedOver(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, withRules := range []bool{false, true} {
		policy := Policy{Bans: BansConfig{On: true}}
		want := banMapCount
		if withRules {
			policy = handedPolicy("")
			policy.Bans = BansConfig{On: true}
			want += ruleMapCount
		}
		old := NewInstance(policy)
		defer old.Close()
		p, err := old.loadFresh()
		require.NoError(t, err)
		defer p.Close()
		table, err := old.Bans()
		require.NoError(t, err)
		_, err = table.SetAllow([]netip.Prefix{netip.MustParsePrefix("198.51.100.128/25")})
		require.NoError(t, err)
		end := time.Now().Add(time.Hour)
		_, err = table.Ban(netip.MustParsePrefix("198.51.100.0/24"), end, BanOriginDetect)
		require.NoError(t, err)
		_, err = table.Ban(netip.MustParsePrefix("2001:db8::7/128"), end, BanOriginCrowdSec)
		require.NoError(t, err)

		in := NewInstance(policy)
		defer in.Close()
		adopted, why := in.AdoptRules(handOffAll(t, old, want))
		require.True(t, adopted, why)
		require.Empty(t, why)
		q, err := in.loadFresh()
		require.NoError(t, err)
		defer q.Close()
		require.Zero(t, passed(t, q, banFrame("198.51.100.5"), 100), "a banned source's frames passed the successor")
		require.Equal(t, 10, passed(t, q, banFrame("198.51.100.200"), 10), "allowed")
		if withRules {
			require.Zero(t, passed(t, q, banFrame("10.1.0.5"), 10), "the rules came too")
		}

		mine, err := in.Bans()
		require.NoError(t, err)
		theirs, ours := table.Entries(), mine.Entries()
		require.Len(t, ours, len(theirs))
		for i := range theirs {
			require.Equal(t, theirs[i].Prefix, ours[i].Prefix)
			require.Equal(t, theirs[i].Origin, ours[i].Origin)
			require.WithinDuration(t, end, ours[i].End, time.Millisecond)
		}
		v4, v6 := mine.InForce()
		require.Equal(t, [2]int{1, 1}, [2]int{v4, v6})
		// The refcounts came back: a second /24 in the bucket, lifted, leaves the first in force.
		o, err := mine.Ban(netip.MustParsePrefix("198.51.101.0/24"), end, 0)
		require.NoError(t, err)
		require.Equal(t, BanAdded, o)
		require.Zero(t, passed(t, q, banFrame("198.51.100.5"), 10))
		_, err = mine.Lift(netip.MustParsePrefix("198.51.101.0/24"), 0)
		require.NoError(t, err)
		require.Zero(t, passed(t, q, banFrame("198.51.100.5"), 10))
		o, err = mine.Ban(netip.MustParsePrefix("198.51.100.130/32"), end, 0)
		require.NoError(t, err)
		require.Equal(t, BanRefusedAllowed, o, "the allowed prefixes came too")

		ok, err := mine.Lift(netip.MustParsePrefix("198.51.100.0/24"), BanOriginDetect)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 10, passed(t, p, banFrame("198.51.100.5"), 10), "the old program runs on the same maps")

		other := policy
		other.Bans.Max = 5
		next := NewInstance(other)
		defer next.Close()
		adopted, why = next.AdoptRules(handOffAll(t, in, want))
		require.Equal(t, withRules, adopted, "the rule maps alone")
		require.Contains(t, why, "the bans' max or the program version changed")
	}
}

// TestBanCountersFoundOnProgram: a program taken over in place, whose ban
// counters were not handed by descriptor, reads them through the program.
func TestBanCountersFoundOnProgram(t *testing.T) {
	testns.RequirePrivileged(t)
	p, err := Load(Policy{Bans: BansConfig{On: true}})
	require.NoError(t, err)
	defer p.Close()
	table, err := p.Bans()
	require.NoError(t, err)
	_, err = table.Ban(netip.MustParsePrefix("198.51.100.5/32"), time.Now().Add(time.Hour), BanOriginDetect)
	require.NoError(t, err)
	require.Zero(t, passed(t, p, banFrame("198.51.100.5"), 7))
	taken := &Program{in: p.in, objs: objects{Prog: p.objs.Prog}}
	c, err := taken.BanCounters()
	require.NoError(t, err)
	defer taken.closeBanCounters()
	require.Equal(t, uint64(7), c[BanOriginDetect][BanDrop].Packets)
	require.Equal(t, uint64(7*len(banFrame("198.51.100.5"))), c[BanOriginDetect][BanDrop].Bytes)
}

// TestBanClaimsHandedOver: every origin's claim on a prefix crosses a
// handover: the successor's table lists both with their ends, and one
// origin's lift there leaves the prefix banned by the other's.
func TestBanClaimsHandedOver(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := Policy{Bans: BansConfig{On: true}}
	old := NewInstance(policy)
	defer old.Close()
	p, err := old.loadFresh()
	require.NoError(t, err)
	defer p.Close()
	table, err := old.Bans()
	require.NoError(t, err)
	prefix := netip.MustParsePrefix("198.51.100.0/24")
	detectEnd, feedEnd := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	_, err = table.Ban(prefix, detectEnd, BanOriginDetect)
	require.NoError(t, err)
	_, err = table.Ban(prefix, feedEnd, BanOriginCrowdSec)
	require.NoError(t, err)

	in := NewInstance(policy)
	defer in.Close()
	adopted, why := in.AdoptRules(handOffAll(t, old, banMapCount))
	require.True(t, adopted, why)
	q, err := in.loadFresh()
	require.NoError(t, err)
	defer q.Close()
	mine, err := in.Bans()
	require.NoError(t, err)
	got := mine.Entries()
	require.Len(t, got, 2)
	require.Equal(t, BanOriginCrowdSec, got[0].Origin)
	require.WithinDuration(t, feedEnd, got[0].End, time.Millisecond)
	require.Equal(t, BanOriginDetect, got[1].Origin)
	require.WithinDuration(t, detectEnd, got[1].End, time.Millisecond)

	ok, err := mine.Lift(prefix, BanOriginDetect)
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, passed(t, q, banFrame("198.51.100.5"), 10), "the feed's claim holds it after the handover")
	ok, err = mine.Lift(prefix, BanOriginCrowdSec)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 10, passed(t, q, banFrame("198.51.100.5"), 10))
}
