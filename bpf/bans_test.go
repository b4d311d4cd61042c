package bpf_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// banRig is a program with bans, its table, and what frames it ran.
type banRig struct {
	t     *testing.T
	p     *bpf.Program
	table *bpf.BanTable
}

func loadBans(t *testing.T, policy bpf.Policy) *banRig {
	t.Helper()
	testns.RequirePrivileged(t)
	policy.Bans.On = true
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	table, err := p.Bans()
	require.NoError(t, err)
	return &banRig{t: t, p: p, table: table}
}

// run runs a UDP frame from src (to port dport) through the program and
// returns its verdict.
func (r *banRig) run(f ruleFrame) int {
	r.t.Helper()
	v, err := r.p.XDP().Run(&ebpf.RunOptions{Data: f.build()})
	require.NoError(r.t, err)
	return int(v)
}

func from(src string, tags ...frames.Tag) ruleFrame {
	dst := "192.0.2.53"
	if netip.MustParseAddr(src).Is6() {
		dst = "2001:db8::53"
	}
	return ruleFrame{src: src, dst: dst, proto: frames.ProtoUDP, sport: 40000, dport: 4000, tags: tags}
}

func (r *banRig) ban(p string, end time.Duration, origin uint8) bpf.BanOutcome {
	r.t.Helper()
	o, err := r.table.Ban(netip.MustParsePrefix(p), time.Now().Add(end), origin)
	require.NoError(r.t, err, p)
	return o
}

func (r *banRig) counts() bpf.BanCounts {
	r.t.Helper()
	c, err := r.p.BanCounters()
	require.NoError(r.t, err)
	return c
}

// TestBans: banned /32s and ranges of both families drop their sources,
// VLAN-tagged or not; an allowed prefix inside a banned range passes, a
// ban inside an allowed prefix is refused; other sources pass; each frame
// is counted under its origin and as a drop of its class, exactly; a lift
// takes effect at once.
func TestBans(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	_, err := r.table.SetAllow([]netip.Prefix{netip.MustParsePrefix("192.0.2.128/25"), netip.MustParsePrefix("2001:db8:1:1::/64")})
	require.NoError(t, err)
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.0/24", time.Hour, bpf.BanOriginCrowdSec))
	require.Equal(t, bpf.BanAdded, r.ban("198.51.100.7/32", time.Hour, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanRefusedAllowed, r.ban("192.0.2.130/32", time.Hour, 0))
	require.Equal(t, bpf.BanRefusedAllowed, r.ban("192.0.2.128/25", time.Hour, 0))
	require.Equal(t, bpf.BanAdded, r.ban("2001:db8:1::/48", time.Hour, bpf.BanOriginCrowdSec))
	require.Equal(t, bpf.BanAdded, r.ban("2001:db8:2::5/128", time.Hour, bpf.BanOriginCrowdSec))
	require.Equal(t, bpf.BanUpdated, r.ban("2001:db8:2::5/128", 2*time.Hour, bpf.BanOriginCrowdSec))
	v4, v6 := r.table.InForce()
	require.Equal(t, [2]int{2, 2}, [2]int{v4, v6})

	qinq := []frames.Tag{{TPID: frames.Ether8021AD, VID: 10}, {TPID: frames.Ether8021Q, VID: 20}}
	cases := []struct {
		f    ruleFrame
		want int
	}{
		{from("198.51.100.7"), xdpDrop},
		{from("198.51.100.8"), xdpPass},
		{from("192.0.2.5"), xdpDrop},
		{from("192.0.2.6", qinq...), xdpDrop},
		{from("192.0.2.200"), xdpPass}, // allowed inside the banned /24
		{from("192.0.3.5"), xdpPass},
		{from("2001:db8:1:5::1"), xdpDrop},
		{from("2001:db8:1:5::1", qinq[1]), xdpDrop},
		{from("2001:db8:1:1::9"), xdpPass}, // allowed inside the banned /48
		{from("2001:db8:2::5"), xdpDrop},
		{from("2001:db8:2::6"), xdpPass},
	}
	var want bpf.BanCounts
	var wantBlock bpf.Block
	for i, c := range cases {
		require.Equal(t, c.want, r.run(c.f), "frame %d from %s", i, c.f.src)
		n := uint64(len(c.f.build()))
		class := bpf.IPv4Class(frames.ProtoUDP)
		if netip.MustParseAddr(c.f.src).Is6() {
			class = bpf.IPv6Class(frames.ProtoUDP)
		}
		act := bpf.ActionPass
		if c.want == xdpDrop {
			act = bpf.ActionDrop
			origin := bpf.BanOriginCrowdSec
			if c.f.src == "198.51.100.7" {
				origin = bpf.BanOriginDetect
			}
			want[origin][bpf.BanDrop].Packets++
			want[origin][bpf.BanDrop].Bytes += n
		}
		wantBlock.Class[class][act].Packets++
		wantBlock.Class[class][act].Bytes += n
	}
	require.Equal(t, want, r.counts())
	var got bpf.Block
	require.NoError(t, r.p.ReadBlock(&got))
	require.Equal(t, wantBlock.Class, got.Class, "the frames bans dropped are drops of their class")

	lifted, err := r.table.Lift(netip.MustParsePrefix("198.51.100.7/32"), bpf.BanOriginDetect)
	require.NoError(t, err)
	require.True(t, lifted)
	require.Equal(t, xdpPass, r.run(from("198.51.100.7")), "lifted at once")
	lifted, err = r.table.Lift(netip.MustParsePrefix("198.51.100.7/32"), bpf.BanOriginDetect)
	require.NoError(t, err)
	require.False(t, lifted)
	require.Equal(t, xdpDrop, r.run(from("192.0.2.5")), "the other bans stay")
}

// TestBanExpiry: the kernel stops a ban at its end without Expire, and a
// longer ban that ended no longer hides a shorter one in force; Expire
// then removes the ended one only.
func TestBanExpiry(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	require.Equal(t, bpf.BanAdded, r.ban("203.0.113.9/32", 50*time.Millisecond, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanAdded, r.ban("2001:db8:9::9/128", 50*time.Millisecond, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanAdded, r.ban("198.51.100.0/24", time.Hour, bpf.BanOriginCrowdSec))
	require.Equal(t, bpf.BanAdded, r.ban("198.51.100.1/32", 50*time.Millisecond, bpf.BanOriginDetect))
	require.Equal(t, xdpDrop, r.run(from("203.0.113.9")))
	require.Equal(t, xdpDrop, r.run(from("2001:db8:9::9")))
	require.Equal(t, xdpDrop, r.run(from("198.51.100.1")))
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, xdpPass, r.run(from("203.0.113.9")), "ended: the kernel passes it without Expire")
	require.Equal(t, xdpPass, r.run(from("2001:db8:9::9")), "ended: the kernel passes it without Expire")
	require.Equal(t, xdpDrop, r.run(from("198.51.100.1")), "the /24 still bans it")
	c := r.counts()
	require.Equal(t, uint64(3), c[bpf.BanOriginDetect][bpf.BanDrop].Packets)
	require.Equal(t, uint64(1), c[bpf.BanOriginCrowdSec][bpf.BanDrop].Packets)
	v4, v6 := r.table.InForce()
	require.Equal(t, [2]int{1, 0}, [2]int{v4, v6})
	require.Len(t, r.table.Entries(), 4, "held until Expire")
	n, err := r.table.Expire(time.Now(), bpf.BanOriginDetect)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	entries := r.table.Entries()
	require.Len(t, entries, 1)
	require.Equal(t, netip.MustParsePrefix("198.51.100.0/24"), entries[0].Prefix)
	require.WithinDuration(t, time.Now().Add(time.Hour), entries[0].End, time.Second)
	require.Equal(t, xdpDrop, r.run(from("198.51.100.1")))
}

// TestBanShortPrefixes: prefixes shorter than the buckets (IPv4 /16, IPv6
// /48) ban every address in them, and lifting them clears every bucket.
func TestBanShortPrefixes(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	require.Equal(t, bpf.BanAdded, r.ban("10.0.0.0/8", time.Hour, 0))
	require.Equal(t, bpf.BanAdded, r.ban("2001:db8::/29", time.Hour, 0))
	require.Equal(t, xdpDrop, r.run(from("10.200.1.1")))
	require.Equal(t, xdpDrop, r.run(from("2001:dbf::1")))
	require.Equal(t, xdpPass, r.run(from("11.0.0.1")))
	require.Equal(t, xdpPass, r.run(from("2001:dc0::1")))
	for _, p := range []string{"10.0.0.0/8", "2001:db8::/29"} {
		ok, err := r.table.Lift(netip.MustParsePrefix(p), 0)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Equal(t, xdpPass, r.run(from("10.200.1.1")))
	require.Equal(t, xdpPass, r.run(from("2001:dbf::1")))
}

// TestBansFull: beyond max bans of a family a new ban is refused, the
// other family and changes to held bans are not; a lift makes room.
func TestBansFull(t *testing.T) {
	r := loadBans(t, bpf.Policy{Bans: bpf.BansConfig{Max: 2}})
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.1/32", time.Hour, 0))
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.2/32", time.Hour, 0))
	require.Equal(t, bpf.BanRefusedFull, r.ban("192.0.2.3/32", time.Hour, 0))
	require.Equal(t, xdpPass, r.run(from("192.0.2.3")))
	require.Equal(t, bpf.BanUpdated, r.ban("192.0.2.2/32", 2*time.Hour, 0))
	require.Equal(t, bpf.BanAdded, r.ban("2001:db8::1/128", time.Hour, 0))
	_, err := r.table.Lift(netip.MustParsePrefix("192.0.2.1/32"), 0)
	require.NoError(t, err)
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.3/32", time.Hour, 0))
	require.Equal(t, xdpDrop, r.run(from("192.0.2.3")))
}

// TestBansDryRun: with bans in dry run a banned frame is counted
// would_drop and goes on to the rules and the protocol policy, which
// decide and count it as without bans.
func TestBansDryRun(t *testing.T) {
	policy := bpf.Policy{
		Protocols: []uint8{frames.ProtoTCP},
		Rules:     []bpf.Rule{{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53))}},
		Bans:      bpf.BansConfig{DryRun: true},
	}
	r := loadBans(t, policy)
	require.Equal(t, bpf.BanAdded, r.ban("198.51.100.0/24", time.Hour, bpf.BanOriginDetect))
	dns := ruleFrame{src: "198.51.100.1", dst: "192.0.2.53", proto: frames.ProtoUDP, sport: 40000, dport: 53}
	other := from("198.51.100.1")
	tcp := ruleFrame{src: "198.51.100.1", dst: "192.0.2.53", proto: frames.ProtoTCP, sport: 40000, dport: 80}
	require.Equal(t, xdpDrop, r.run(dns), "the rule drops it")
	require.Equal(t, xdpPass, r.run(other), "nothing else drops it")
	require.Equal(t, xdpDrop, r.run(tcp), "the protocol policy drops it")
	var want bpf.BanCounts
	for _, f := range []ruleFrame{dns, other, tcp} {
		want[bpf.BanOriginDetect][bpf.BanWouldDrop].Packets++
		want[bpf.BanOriginDetect][bpf.BanWouldDrop].Bytes += uint64(len(f.build()))
	}
	require.Equal(t, want, r.counts())
	var got bpf.Block
	require.NoError(t, r.p.ReadBlock(&got))
	require.Equal(t, uint64(1), got.Rule[0].Packets, "the rule decided the DNS query")
	require.Equal(t, uint64(1), got.Class[bpf.IPv4Class(frames.ProtoUDP)][bpf.ActionDrop].Packets)
	require.Equal(t, uint64(1), got.Class[bpf.IPv4Class(frames.ProtoUDP)][bpf.ActionPass].Packets)
	require.Equal(t, uint64(1), got.Class[bpf.IPv4Class(frames.ProtoTCP)][bpf.ActionDrop].Packets)
}

// TestBanAllowLifts: allowing a prefix lifts the bans inside it, keeps
// the one covering it, and the allowed part passes; dropping the allowed
// prefix bans the covering range's whole again.
func TestBanAllowLifts(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.0/24", time.Hour, 0))
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.9/32", time.Hour, 0))
	lifted, err := r.table.SetAllow([]netip.Prefix{netip.MustParsePrefix("192.0.2.8/29")})
	require.NoError(t, err)
	require.Equal(t, 1, lifted)
	require.Equal(t, xdpPass, r.run(from("192.0.2.9")))
	require.Equal(t, xdpDrop, r.run(from("192.0.2.1")))
	lifted, err = r.table.SetAllow(nil)
	require.NoError(t, err)
	require.Zero(t, lifted)
	require.Equal(t, xdpDrop, r.run(from("192.0.2.9")))
	_, err = r.table.Ban(netip.MustParsePrefix("0.0.0.0/0"), time.Now().Add(time.Hour), 0)
	require.ErrorContains(t, err, "covers a whole family")
	_, err = r.table.Ban(netip.MustParsePrefix("192.0.2.1/32"), time.Now().Add(-time.Second), 0)
	require.ErrorContains(t, err, "has passed")
	_, err = r.table.Ban(netip.MustParsePrefix("192.0.2.1/32"), time.Now().Add(time.Hour), bpf.BanOrigins)
	require.ErrorContains(t, err, "origin 4 is out of range")
}

// TestBansOff: without bans the instance has no ban table and its
// program no ban counters.
func TestBansOff(t *testing.T) {
	testns.RequirePrivileged(t)
	p, err := bpf.Load(bpf.Policy{})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Bans()
	require.Error(t, err)
	c, err := p.BanCounters()
	require.NoError(t, err)
	require.Zero(t, c)
}

// TestBanManyLengths: a bucket with more lengths than its list holds is
// probed through its bitmap, longest first, for both families.
func TestBanManyLengths(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	for n := 17; n <= 32; n++ {
		require.Equal(t, bpf.BanAdded, r.ban(netip.PrefixFrom(netip.MustParseAddr("10.1.0.0"), n).String(), time.Hour, 0))
	}
	for n := 97; n <= 128; n++ {
		require.Equal(t, bpf.BanAdded, r.ban(netip.PrefixFrom(netip.MustParseAddr("2001:db8::"), n).String(), time.Hour, 0))
	}
	require.Equal(t, bpf.BanAdded, r.ban("10.1.192.0/20", time.Hour, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanAdded, r.ban("2001:db8::1:0:0/100", time.Hour, bpf.BanOriginDetect))
	require.Equal(t, xdpDrop, r.run(from("10.1.200.1")))
	require.Equal(t, xdpDrop, r.run(from("10.1.0.0")))
	require.Equal(t, xdpPass, r.run(from("10.1.130.1")))
	require.Equal(t, xdpDrop, r.run(from("2001:db8::1:0:5")))
	require.Equal(t, xdpDrop, r.run(from("2001:db8::")))
	require.Equal(t, xdpPass, r.run(from("2001:db8::2:0:5")))
	c := r.counts()
	require.Equal(t, uint64(2), c[bpf.BanOriginDetect][bpf.BanDrop].Packets)
	require.Equal(t, uint64(2), c[bpf.BanOriginCrowdSec][bpf.BanDrop].Packets)
}

// TestBansMaxChecked: a max out of range is refused at load, naming it.
func TestBansMaxChecked(t *testing.T) {
	testns.RequirePrivileged(t)
	for _, max := range []int{-1, bpf.MaxBanLimit + 1} {
		_, err := bpf.Load(bpf.Policy{Bans: bpf.BansConfig{On: true, Max: max}})
		require.ErrorContains(t, err, fmt.Sprintf("bans max %d is out of range: give 1 to %d, or 0 for %d", max, bpf.MaxBanLimit, bpf.DefaultBanMax))
	}
}

// TestBansSwapRules: a swap of the rules' prefixes keeps the bans in
// force: the new program runs on the same ban maps, whose table the new
// instance shares, and a policy with other bans is not swapped into.
func TestBansSwapRules(t *testing.T) {
	testns.RequirePrivileged(t)
	ns := testns.New(t)
	withBans := func(list ...string) bpf.Policy {
		p := swapPolicy(list...)
		p.Bans = bpf.BansConfig{On: true}
		return p
	}
	p, err := bpf.Load(withBans("198.51.100.0/24"))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeGeneric) }))
	table, err := p.Bans()
	require.NoError(t, err)
	_, err = table.Ban(netip.MustParsePrefix("203.0.113.7/32"), time.Now().Add(time.Hour), bpf.BanOriginDetect)
	require.NoError(t, err)
	r := &banRig{t: t, p: p, table: table}
	require.Equal(t, xdpDrop, r.run(from("203.0.113.7")))

	other := withBans("192.0.2.0/24")
	other.Bans.DryRun = true
	require.ErrorContains(t, p.SwapRules(compile(t, other)), "the drop policy differs")

	next := compile(t, withBans("192.0.2.0/24"))
	require.NoError(t, p.SwapRules(next))
	require.Equal(t, xdpDrop, r.run(from("203.0.113.7")), "the ban stays in force across the swap")
	mine, err := next.Bans()
	require.NoError(t, err)
	require.Same(t, table, mine)
	ok, err := mine.Lift(netip.MustParsePrefix("203.0.113.7/32"), bpf.BanOriginDetect)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, xdpPass, r.run(from("203.0.113.7")))
	require.Equal(t, uint64(2), r.counts()[bpf.BanOriginDetect][bpf.BanDrop].Packets, "the ban counters go on")
}

// TestBansMultiBuffer: the multi-buffer variant runs on the same ban maps
// and counters.
func TestBansMultiBuffer(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	require.Equal(t, bpf.BanAdded, r.ban("198.51.100.7/32", time.Hour, bpf.BanOriginDetect))
	require.Equal(t, xdpDrop, r.run(from("198.51.100.7")))
	require.NoError(t, r.p.UseMultiBuffer())
	require.Equal(t, bpf.FeatureBans|bpf.FeatureMultiBuffer, r.p.Features())
	require.Equal(t, xdpDrop, r.run(from("198.51.100.7")))
	require.Equal(t, xdpPass, r.run(from("198.51.100.8")))
	require.Equal(t, uint64(2), r.counts()[bpf.BanOriginDetect][bpf.BanDrop].Packets)
}

// lift lifts origin's claim on p and says whether it had one.
func (r *banRig) lift(p string, origin uint8) bool {
	r.t.Helper()
	ok, err := r.table.Lift(netip.MustParsePrefix(p), origin)
	require.NoError(r.t, err, p)
	return ok
}

// expire sweeps origin's ended claims and says how many went.
func (r *banRig) expire(origin uint8) int {
	r.t.Helper()
	n, err := r.table.Expire(time.Now(), origin)
	require.NoError(r.t, err)
	return n
}

// dropped is the frames the bans of each origin dropped.
func (r *banRig) dropped() [2]uint64 {
	r.t.Helper()
	c := r.counts()
	return [2]uint64{c[bpf.BanOriginCrowdSec][bpf.BanDrop].Packets, c[bpf.BanOriginDetect][bpf.BanDrop].Packets}
}

// TestBanOwners: a prefix two origins ban stays banned until the last
// claim ends; lifting, expiring or replacing one origin's claim leaves the
// other's; each origin's claims are counted apart, and the frames are
// counted under the origin that banned first while its claim holds.
func TestBanOwners(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	const x = "10.2.2.2/32"
	require.Equal(t, bpf.BanAdded, r.ban(x, time.Hour, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanAdded, r.ban(x, 100*time.Millisecond, bpf.BanOriginCrowdSec), "a claim of its own")
	require.Equal(t, bpf.BanUpdated, r.ban(x, 200*time.Millisecond, bpf.BanOriginCrowdSec), "its own claim replaced")
	v4, _ := r.table.InForce()
	require.Equal(t, 1, v4, "one prefix in force")
	for _, o := range []uint8{bpf.BanOriginCrowdSec, bpf.BanOriginDetect} {
		v4, _ = r.table.InForceOf(o)
		require.Equal(t, 1, v4, "origin %d's claim", o)
	}
	entries := r.table.Entries()
	require.Len(t, entries, 2, "one entry a claim")
	require.Equal(t, []uint8{bpf.BanOriginCrowdSec, bpf.BanOriginDetect}, []uint8{entries[0].Origin, entries[1].Origin})
	require.WithinDuration(t, time.Now().Add(200*time.Millisecond), entries[0].End, 50*time.Millisecond)
	require.WithinDuration(t, time.Now().Add(time.Hour), entries[1].End, time.Second)
	require.Equal(t, xdpDrop, r.run(from("10.2.2.2")))
	require.Equal(t, [2]uint64{0, 1}, r.dropped(), "detection banned first: its frames")

	time.Sleep(250 * time.Millisecond)
	require.Equal(t, xdpDrop, r.run(from("10.2.2.2")), "the shorter claim's end leaves the longer")
	require.Equal(t, 0, r.expire(bpf.BanOriginDetect))
	require.Equal(t, 1, r.expire(bpf.BanOriginCrowdSec))
	require.Equal(t, xdpDrop, r.run(from("10.2.2.2")), "the shorter claim's sweep leaves the longer")
	v4, _ = r.table.InForceOf(bpf.BanOriginCrowdSec)
	require.Zero(t, v4)

	require.Equal(t, bpf.BanAdded, r.ban(x, time.Hour, bpf.BanOriginCrowdSec))
	require.True(t, r.lift(x, bpf.BanOriginCrowdSec))
	require.False(t, r.lift(x, bpf.BanOriginCrowdSec), "lifted already")
	require.Equal(t, xdpDrop, r.run(from("10.2.2.2")), "one origin's lift leaves the other's claim")
	require.Equal(t, [2]uint64{0, 4}, r.dropped())
	require.True(t, r.lift(x, bpf.BanOriginDetect))
	require.Equal(t, xdpPass, r.run(from("10.2.2.2")), "the last claim lifted")
	require.Empty(t, r.table.Entries())
}

// TestBanOwnersFrames: the frames of a prefix two origins ban go to the
// one that banned first until its claim ends, then to the other, from the
// first sweep of any origin after that end; when detection's ban ends, a
// LAPI decision on the same prefix (detection's ban shared and come back)
// holds it until its own end.
func TestBanOwnersFrames(t *testing.T) {
	r := loadBans(t, bpf.Policy{})
	require.Equal(t, bpf.BanAdded, r.ban("10.2.2.2/32", 100*time.Millisecond, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanAdded, r.ban("10.2.2.2/32", time.Hour, bpf.BanOriginCrowdSec))
	for range 3 {
		require.Equal(t, xdpDrop, r.run(from("10.2.2.2")))
	}
	require.Equal(t, [2]uint64{0, 3}, r.dropped(), "detection's frames while its ban holds: the decision counts none")
	time.Sleep(150 * time.Millisecond)
	require.Equal(t, 0, r.expire(bpf.BanOriginCrowdSec), "the feed's sweep takes none of detection's")
	require.Equal(t, xdpDrop, r.run(from("10.2.2.2")))
	require.Equal(t, [2]uint64{1, 3}, r.dropped(), "detection's ended: the decision's frames")
	require.Equal(t, 1, r.expire(bpf.BanOriginDetect))
	require.Equal(t, xdpDrop, r.run(from("10.2.2.2")), "banned until the decision's end")
	v4, _ := r.table.InForceOf(bpf.BanOriginDetect)
	require.Zero(t, v4)
	v4, _ = r.table.InForceOf(bpf.BanOriginCrowdSec)
	require.Equal(t, 1, v4)
}

// TestBanOwnersFull: a second origin's claim on a prefix held is no new
// entry: never refused over max, and a new prefix still is.
func TestBanOwnersFull(t *testing.T) {
	r := loadBans(t, bpf.Policy{Bans: bpf.BansConfig{Max: 1}})
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.1/32", time.Hour, bpf.BanOriginDetect))
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.1/32", time.Hour, bpf.BanOriginCrowdSec))
	require.Equal(t, bpf.BanRefusedFull, r.ban("192.0.2.2/32", time.Hour, bpf.BanOriginCrowdSec))
	require.True(t, r.lift("192.0.2.1/32", bpf.BanOriginDetect))
	require.Equal(t, bpf.BanRefusedFull, r.ban("192.0.2.2/32", time.Hour, bpf.BanOriginCrowdSec), "the decision's claim holds the entry")
	require.True(t, r.lift("192.0.2.1/32", bpf.BanOriginCrowdSec))
	require.Equal(t, bpf.BanAdded, r.ban("192.0.2.2/32", time.Hour, bpf.BanOriginCrowdSec))
}
