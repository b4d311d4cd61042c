package bpf_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// limitRig is a program with bans whose clock the test sets, from the
// monotonic time it was loaded at.
type limitRig struct {
	*banRig
	base uint64
}

func loadLimitBans(t *testing.T, policy bpf.Policy) *limitRig {
	t.Helper()
	restore := bpf.UseLimitClock()
	t.Cleanup(restore)
	r := &limitRig{banRig: loadBans(t, policy), base: bpf.MonoClock()}
	r.at(0)
	return r
}

// at sets the programs' clock to d after base.
func (r *limitRig) at(d time.Duration) {
	r.t.Helper()
	require.NoError(r.t, bpf.SetBanClock(r.table, r.base+uint64(d)))
}

func (r *limitRig) limit(p string, end time.Duration, origin uint8, pps uint64) bpf.BanOutcome {
	r.t.Helper()
	o, err := r.table.Limit(netip.MustParsePrefix(p), time.Now().Add(end), origin, pps)
	require.NoError(r.t, err, p)
	return o
}

// send runs n frames, from each of srcs in turn, and counts those passed.
func (r *limitRig) send(n int, srcs ...string) int {
	r.t.Helper()
	pass := 0
	for i := range n {
		if r.run(from(srcs[i%len(srcs)])) == xdpPass {
			pass++
		}
	}
	return pass
}

// frameLen is the length of the frames send sends from IPv4 sources.
var frameLen = uint64(len(from("10.3.0.1").build()))

// TestBanLimit: a limit claim of 100 frames a second (burst 10) on a /24
// admits exactly the GCRA's allowance of the prefix's frames as a whole,
// from all its sources, at each time the clock is set to, and drops the
// rest, counted under its origin as drops and as drops of their class;
// the frames admitted are counted as unbanned; Entries shows the rate.
func TestBanLimit(t *testing.T) {
	r := loadLimitBans(t, bpf.Policy{})
	require.Equal(t, bpf.BanAdded, r.limit("10.3.0.0/24", time.Hour, bpf.BanOriginDetect, 100))
	entries := r.table.Entries()
	require.Len(t, entries, 1)
	require.Equal(t, netip.MustParsePrefix("10.3.0.0/24"), entries[0].Prefix)
	require.Equal(t, bpf.BanOriginDetect, entries[0].Origin)
	require.Equal(t, uint64(100), entries[0].LimitPPS)
	require.True(t, entries[0].IsLimit())
	v4, _ := r.table.InForceOf(bpf.BanOriginDetect)
	require.Equal(t, 1, v4)

	require.Equal(t, 10, r.send(25, "10.3.0.1", "10.3.0.2", "10.3.0.3"), "the burst, shared by the prefix's sources")
	r.at(50 * time.Millisecond)
	require.Equal(t, 5, r.send(30, "10.3.0.4"), "50 ms at 100 a second")
	r.at(10 * time.Second)
	require.Equal(t, 10, r.send(20, "10.3.0.5"), "a long silence earns the burst, no more")
	require.Equal(t, 20, r.send(20, "10.3.1.1"), "outside the prefix")

	var want bpf.BanCounts
	want[bpf.BanOriginDetect][bpf.BanDrop] = bpf.Counter{Packets: 50, Bytes: 50 * frameLen}
	require.Equal(t, want, r.counts())
	var got bpf.Block
	require.NoError(t, r.p.ReadBlock(&got))
	udp := bpf.IPv4Class(frames.ProtoUDP)
	require.Equal(t, bpf.Counter{Packets: 50, Bytes: 50 * frameLen}, got.Class[udp][bpf.ActionDrop])
	require.Equal(t, bpf.Counter{Packets: 45, Bytes: 45 * frameLen}, got.Class[udp][bpf.ActionPass])
}

// TestBanLimitUnderDrop: another origin's drop claim over a limit claim
// drops every frame, counted under it, until its end; from then on the
// kernel limits the prefix by itself, counted under the limit's origin;
// rewriting the entry keeps the rate spent; lifting the drop claim leaves
// the limit, and Expire of the limit's origin takes it with its end.
func TestBanLimitUnderDrop(t *testing.T) {
	r := loadLimitBans(t, bpf.Policy{})
	const x = "10.4.0.0/16"
	require.Equal(t, bpf.BanAdded, r.limit(x, time.Minute, bpf.BanOriginDetect, 100))
	require.Equal(t, bpf.BanAdded, r.ban(x, 10*time.Second, bpf.BanOriginCrowdSec))
	require.Zero(t, r.send(25, "10.4.1.1"), "the drop claim wins")
	require.Equal(t, [2]uint64{25, 0}, r.dropped())
	r.at(11 * time.Second)
	require.Equal(t, 10, r.send(25, "10.4.1.1"), "the drop claim ended: limited, no sweep")
	require.Equal(t, [2]uint64{25, 15}, r.dropped())

	require.Equal(t, bpf.BanUpdated, r.ban(x, time.Minute, bpf.BanOriginCrowdSec))
	require.Zero(t, r.send(5, "10.4.1.1"))
	require.True(t, r.lift(x, bpf.BanOriginCrowdSec))
	require.Zero(t, r.send(5, "10.4.1.1"), "the rewrites kept the rate spent: no new burst")
	r.at(20 * time.Second)
	require.Equal(t, 10, r.send(25, "10.4.2.2"), "the lift leaves the limit")
	require.Equal(t, [2]uint64{30, 35}, r.dropped())
	entries := r.table.Entries()
	require.Len(t, entries, 1)
	require.Equal(t, bpf.BanEntry{Prefix: netip.MustParsePrefix(x), End: entries[0].End, Origin: bpf.BanOriginDetect, LimitPPS: 100}, entries[0])

	r.at(61 * time.Second)
	require.Equal(t, 25, r.send(25, "10.4.2.2"), "the kernel stops the limit at its end")
	n, err := r.table.Expire(time.Now().Add(61*time.Second), bpf.BanOriginCrowdSec)
	require.NoError(t, err)
	require.Zero(t, n, "another origin's sweep takes none of it")
	n, err = r.table.Expire(time.Now().Add(61*time.Second), bpf.BanOriginDetect)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, r.table.Entries())
	require.Equal(t, [2]uint64{30, 35}, r.dropped())
}

// TestBanLimitKinds: one origin's claim turns from a limit into a drop
// (Ban) and back (Limit, with the new end and rate); the frames within a
// limit go on to a shorter prefix's drop claim, which drops them under its
// origin; outcomes and errors are Ban's.
func TestBanLimitKinds(t *testing.T) {
	r := loadLimitBans(t, bpf.Policy{Bans: bpf.BansConfig{Max: 2}})
	const x = "10.5.5.5/32"
	require.Equal(t, bpf.BanAdded, r.limit(x, time.Hour, bpf.BanOriginDetect, 10))
	require.Equal(t, 1, r.send(5, "10.5.5.5"), "10 a second: a burst of 1")
	require.Equal(t, bpf.BanUpdated, r.ban(x, time.Hour, bpf.BanOriginDetect))
	r.at(time.Second)
	require.Zero(t, r.send(5, "10.5.5.5"), "a drop now")
	require.Equal(t, bpf.BanUpdated, r.limit(x, 2*time.Hour, bpf.BanOriginDetect, 20))
	require.Equal(t, 2, r.send(5, "10.5.5.5"), "a limit again, of 20 a second")
	entries := r.table.Entries()
	require.Len(t, entries, 1)
	require.Equal(t, uint64(20), entries[0].LimitPPS)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), entries[0].End, time.Second)
	require.Equal(t, [2]uint64{0, 4 + 5 + 3}, r.dropped())

	require.Equal(t, bpf.BanAdded, r.ban("10.5.0.0/16", time.Hour, bpf.BanOriginCrowdSec))
	r.at(time.Minute)
	require.Zero(t, r.send(5, "10.5.5.5"), "the /32's limit drops those over it, the /16 the others")
	require.Equal(t, [2]uint64{2, 12 + 3}, r.dropped(), "the frames within the limit are the /16's")

	_, err := r.table.SetAllow([]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")})
	require.NoError(t, err)
	require.Equal(t, bpf.BanRefusedAllowed, r.limit("192.0.2.7/32", time.Hour, bpf.BanOriginDetect, 10))
	require.Equal(t, bpf.BanRefusedFull, r.limit("10.6.0.0/16", time.Hour, bpf.BanOriginDetect, 10))
	for _, bad := range []struct {
		end    time.Duration
		origin uint8
		pps    uint64
	}{{time.Hour, 1, 0}, {time.Hour, 1, bpf.MaxBanLimitPPS + 1}, {-time.Second, 1, 10}, {time.Hour, bpf.BanOrigins, 10}} {
		_, err := r.table.Limit(netip.MustParsePrefix(x), time.Now().Add(bad.end), bad.origin, bad.pps)
		require.Error(t, err, "%+v", bad)
	}
	_, err = r.table.Limit(netip.MustParsePrefix("10.0.0.0/0"), time.Now().Add(time.Hour), 1, 10)
	require.Error(t, err)
}

// TestBanLimitDryRun: in a bans dry run the frames over a limit are
// counted would_drop and pass, as all the others, and the rules decide
// every frame as without bans.
func TestBanLimitDryRun(t *testing.T) {
	policy := bpf.Policy{
		Rules: []bpf.Rule{{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53))}},
		Bans:  bpf.BansConfig{DryRun: true},
	}
	r := loadLimitBans(t, policy)
	require.Equal(t, bpf.BanAdded, r.limit("10.7.0.0/24", time.Hour, bpf.BanOriginDetect, 100))
	require.Equal(t, 25, r.send(25, "10.7.0.1"))
	dns := ruleFrame{src: "10.7.0.1", dst: "192.0.2.53", proto: frames.ProtoUDP, sport: 40000, dport: 53}
	require.Equal(t, xdpDrop, r.run(dns), "the rule drops it")
	var want bpf.BanCounts
	want[bpf.BanOriginDetect][bpf.BanWouldDrop] = bpf.Counter{Packets: 16, Bytes: 15*frameLen + uint64(len(dns.build()))}
	require.Equal(t, want, r.counts())
	var got bpf.Block
	require.NoError(t, r.p.ReadBlock(&got))
	require.Equal(t, uint64(1), got.Rule[0].Packets, "the rule decided the DNS query")
	require.Equal(t, uint64(25), got.Class[bpf.IPv4Class(frames.ProtoUDP)][bpf.ActionPass].Packets)
}

// TestBanLimitRules: the frames within a limit go on to the rules, which
// decide and count them as unbanned frames; those over it never reach
// them.
func TestBanLimitRules(t *testing.T) {
	policy := bpf.Policy{Rules: []bpf.Rule{{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53))}}}
	r := loadLimitBans(t, policy)
	require.Equal(t, bpf.BanAdded, r.limit("2001:db8:7::/48", time.Hour, bpf.BanOriginDetect, 100))
	dns := ruleFrame{src: "2001:db8:7::1", dst: "2001:db8::53", proto: frames.ProtoUDP, sport: 40000, dport: 53}
	other := from("2001:db8:7::2")
	for range 6 {
		require.Equal(t, xdpDrop, r.run(dns))
	}
	require.Equal(t, 4, r.send(10, "2001:db8:7::2"), "the burst's rest")
	var want bpf.BanCounts
	want[bpf.BanOriginDetect][bpf.BanDrop] = bpf.Counter{Packets: 6, Bytes: 6 * uint64(len(other.build()))}
	require.Equal(t, want, r.counts())
	var got bpf.Block
	require.NoError(t, r.p.ReadBlock(&got))
	require.Equal(t, uint64(6), got.Rule[0].Packets, "the rule decided the DNS queries within the limit")
	udp := bpf.IPv6Class(frames.ProtoUDP)
	require.Equal(t, uint64(6+6), got.Class[udp][bpf.ActionDrop].Packets, "the rule's and the limit's")
	require.Equal(t, uint64(4), got.Class[udp][bpf.ActionPass].Packets)
}
