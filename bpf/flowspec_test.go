//go:build linux

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// flowWire is a frame as sent: what FlowFrame reads of it, and how it is
// fragmented.
type flowWire struct {
	v6       bool
	src, dst netip.Addr
	proto    uint8
	sport    uint16
	dport    uint16
	icmpType uint8
	icmpCode uint8
	tcpFlags uint16
	dscp     uint8
	label    uint32
	length   uint16 // of the IP packet, header included
	df       bool   // IPv4
	// frag: 0 whole, 1 first fragment, 2 a middle one, 3 the last one.
	frag int
}

// flowFrame is what the engine is to read of w (FlowFrame, RFC 8955's
// fields): the oracle's side.
func (w flowWire) flowFrame() bpf.FlowFrame {
	f := bpf.FlowFrame{IPv6: w.v6, Src: w.src, Dst: w.dst, Proto: w.proto, Length: w.length, DSCP: w.dscp}
	if w.v6 {
		f.FlowLabel = w.label
	} else if w.df {
		f.Frag |= bpf.FlowFragDF
	}
	switch w.frag {
	case 1:
		f.Frag |= bpf.FlowFragFF
	case 2:
		f.Frag |= bpf.FlowFragIsF
	case 3:
		f.Frag |= bpf.FlowFragIsF | bpf.FlowFragLF
	}
	later := w.frag >= 2
	if !later {
		switch w.proto {
		case frames.ProtoTCP:
			f.HasPorts, f.HasTCP, f.TCPFlags = true, true, w.tcpFlags&0xFFF
		case frames.ProtoUDP:
			f.HasPorts = true
		}
		if f.HasPorts {
			f.SrcPort, f.DstPort = w.sport, w.dport
		}
		if !w.v6 && w.proto == frames.ProtoICMP || w.v6 && w.proto == frames.ProtoICMPv6 {
			f.HasICMP, f.ICMPType, f.ICMPCode = true, w.icmpType, w.icmpCode
		}
	}
	return f
}

// headerRoom is the least IP packet length w can be built in.
func (w flowWire) headerRoom() int {
	n := 20
	if w.v6 {
		n = 40
		if w.frag != 0 {
			n += 8
		}
	}
	return n + 20
}

// build makes the Ethernet frame of w, its IP packet w.length bytes long.
func (w flowWire) build() []byte {
	l4 := make([]byte, 20)
	switch w.proto {
	case frames.ProtoTCP:
		binary.BigEndian.PutUint16(l4[0:], w.sport)
		binary.BigEndian.PutUint16(l4[2:], w.dport)
		binary.BigEndian.PutUint16(l4[12:], 5<<12|w.tcpFlags&0xFFF)
	case frames.ProtoUDP:
		binary.BigEndian.PutUint16(l4[0:], w.sport)
		binary.BigEndian.PutUint16(l4[2:], w.dport)
	case frames.ProtoICMP, frames.ProtoICMPv6:
		l4[0], l4[1] = w.icmpType, w.icmpCode
	}
	var off uint16
	more := false
	switch w.frag {
	case 1:
		more = true
	case 2:
		off, more = 8, true
	case 3:
		off = 8
	}
	if !w.v6 {
		ip := make([]byte, 20)
		ip[0] = 0x45
		ip[1] = w.dscp << 2
		binary.BigEndian.PutUint16(ip[2:], w.length)
		fo := off / 8
		if more {
			fo |= 0x2000
		}
		if w.df {
			fo |= 0x4000
		}
		binary.BigEndian.PutUint16(ip[6:], fo)
		ip[8], ip[9] = 64, w.proto
		a, b := w.src.As4(), w.dst.As4()
		copy(ip[12:], a[:])
		copy(ip[16:], b[:])
		pkt := append(ip, l4...)
		pkt = append(pkt, make([]byte, int(w.length)-len(pkt))...)
		return frames.Ether(frames.EtherIPv4, pkt)
	}
	ip := make([]byte, 40)
	binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(w.dscp)<<22|w.label&0xFFFFF)
	binary.BigEndian.PutUint16(ip[4:], w.length-40)
	ip[6], ip[7] = w.proto, 64
	a, b := w.src.As16(), w.dst.As16()
	copy(ip[8:], a[:])
	copy(ip[24:], b[:])
	pkt := ip
	if w.frag != 0 {
		fh := make([]byte, 8)
		fh[0] = w.proto
		fo := off
		if more {
			fo |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], fo)
		binary.BigEndian.PutUint32(fh[4:], 7)
		ip[6] = frames.ProtoFragment
		pkt = append(pkt, fh...)
	}
	pkt = append(pkt, l4...)
	pkt = append(pkt, make([]byte, int(w.length)-len(pkt))...)
	return frames.Ether(frames.EtherIPv6, pkt)
}

// flowRig is a program with FlowSpec, its table, and the counts the
// oracle expects of it.
type flowRig struct {
	t     *testing.T
	p     *bpf.Program
	table *bpf.FlowTable
}

func loadFlow(t *testing.T, policy bpf.Policy) *flowRig {
	t.Helper()
	testns.RequirePrivileged(t)
	policy.FlowSpec.On = true
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	table := p.FlowSpec()
	require.NotNil(t, table)
	return &flowRig{t: t, p: p, table: table}
}

func (r *flowRig) set(rules ...bpf.FlowRule) {
	r.t.Helper()
	require.NoError(r.t, r.table.Set(rules))
}

func (r *flowRig) run(w flowWire) int {
	r.t.Helper()
	v, err := r.p.XDP().Run(&ebpf.RunOptions{Data: w.build()})
	require.NoError(r.t, err)
	return int(v)
}

func (r *flowRig) counts() map[string]bpf.FlowCount {
	r.t.Helper()
	c, err := r.p.FlowCounters()
	require.NoError(r.t, err)
	return c
}

// inForce are the counts of the rules in force (those withdrawn since the
// read before left out).
func (r *flowRig) inForce() map[string]bpf.FlowCount {
	r.t.Helper()
	c := r.counts()
	for id, v := range c {
		if v.Gone != nil {
			delete(c, id)
		}
	}
	return c
}

// oracle is what the rules (in order) do with f: the rules applied (the
// first that matches and, while each has Continue, the next ones, at most
// FlowChain) and whether the frame is dropped; limits are not modelled.
func oracle(rules []bpf.FlowRule, f bpf.FlowFrame) (applied []int, drop bool) {
	for i := range rules {
		if !rules[i].Matches(f) {
			continue
		}
		applied = append(applied, i)
		if rules[i].Action == bpf.FlowDrop {
			return applied, true
		}
		if !rules[i].Continue || len(applied) == bpf.FlowChain {
			return applied, false
		}
	}
	return applied, false
}

func udp4(src, dst string, sport, dport uint16, length uint16) flowWire {
	return flowWire{src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: frames.ProtoUDP, sport: sport, dport: dport, length: length}
}

func eq(v uint64) bpf.FlowComponent { return bpf.FlowComponent{{Op: bpf.FlowEQ, Value: v}} }

func pfx(s string) *bpf.FlowPrefix { return &bpf.FlowPrefix{Prefix: netip.MustParsePrefix(s)} }

// TestFlowSpecNTP: the rule, destination /32, UDP, source port 123,
// packet length >= 400, drops exactly the big NTP frames, passes small NTP,
// DNS and TCP, and counts them exactly.
func TestFlowSpecNTP(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	rule := bpf.FlowRule{ID: "ntp", Dst: pfx("192.0.2.10/32"), Proto: eq(17), SrcPort: eq(123),
		PacketLength: bpf.FlowComponent{{Op: bpf.FlowGT | bpf.FlowEQ, Value: 400}}, Action: bpf.FlowDrop}
	r.set(rule)
	require.Equal(t, []bpf.FlowRule{rule}, r.table.Rules())
	big := udp4("198.51.100.1", "192.0.2.10", 123, 40000, 468)
	small := udp4("198.51.100.1", "192.0.2.10", 123, 40000, 90)
	dns := udp4("198.51.100.1", "192.0.2.10", 53, 40000, 468)
	other := udp4("198.51.100.1", "192.0.2.11", 123, 40000, 468)
	tcp := big
	tcp.proto = frames.ProtoTCP
	for range 5 {
		require.Equal(t, xdpDrop, r.run(big))
		require.Equal(t, xdpPass, r.run(small))
		require.Equal(t, xdpPass, r.run(dns))
		require.Equal(t, xdpPass, r.run(other))
		require.Equal(t, xdpPass, r.run(tcp))
	}
	n := uint64(5 * (14 + 468))
	require.Equal(t, map[string]bpf.FlowCount{"ntp": {Packets: 5, Bytes: n, DroppedPackets: 5, DroppedBytes: n}}, r.counts())
	// Counted a drop of its class.
	var c bpf.Block
	require.NoError(t, r.p.ReadBlock(&c))
	require.Equal(t, uint64(5), c.Class[bpf.IPv4Class(17)][bpf.ActionDrop].Packets)
	require.Equal(t, uint64(15), c.Class[bpf.IPv4Class(17)][bpf.ActionPass].Packets)
	require.Equal(t, uint64(5), c.Class[bpf.IPv4Class(6)][bpf.ActionPass].Packets)
	// Two more before the withdrawal, unread: the next read returns the
	// rule once, gone, with its final counts; frames after it pass,
	// uncounted.
	require.Equal(t, xdpDrop, r.run(big))
	require.Equal(t, xdpDrop, r.run(big))
	r.set()
	require.Equal(t, xdpPass, r.run(big))
	n = uint64(7 * (14 + 468))
	gone := rule
	require.Equal(t, map[string]bpf.FlowCount{"ntp": {Packets: 7, Bytes: n, DroppedPackets: 7, DroppedBytes: n, Gone: &gone}}, r.counts())
	require.Empty(t, r.counts())

	// Announced and withdrawn between two reads: its one read.
	r.set(rule)
	require.Equal(t, xdpDrop, r.run(big))
	r.set()
	n = uint64(14 + 468)
	require.Equal(t, map[string]bpf.FlowCount{"ntp": {Packets: 1, Bytes: n, DroppedPackets: 1, DroppedBytes: n, Gone: &gone}}, r.counts())
	// Withdrawn and announced again between two reads: it counts afresh,
	// in force.
	r.set(rule)
	require.Equal(t, xdpDrop, r.run(big))
	r.set()
	r.set(rule)
	require.Equal(t, map[string]bpf.FlowCount{"ntp": {}}, r.counts())
}

// TestFlowSpecOracle: random rule sets of both families and random frames;
// the kernel's verdict and every rule's counters are the matcher's
// (FlowRule.Matches) with the order and Continue semantics, exactly.
func TestFlowSpecOracle(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	rng := rand.New(rand.NewPCG(40, 1))
	for round := range 6 {
		rules := make([]bpf.FlowRule, 8+rng.IntN(40))
		for i := range rules {
			rules[i] = randomRule(rng, fmt.Sprintf("r%d-%d", round, i))
		}
		r.set(rules...)
		want := map[string]bpf.FlowCount{}
		for _, rule := range rules {
			want[rule.ID] = bpf.FlowCount{}
		}
		for range 400 {
			w := randomWire(rng, rules)
			applied, drop := oracle(rules, w.flowFrame())
			n := uint64(len(w.build()))
			for k, i := range applied {
				c := want[rules[i].ID]
				c.Packets++
				c.Bytes += n
				if drop && k == len(applied)-1 {
					c.DroppedPackets++
					c.DroppedBytes += n
				}
				want[rules[i].ID] = c
			}
			verdict := xdpPass
			if drop {
				verdict = xdpDrop
			}
			require.Equal(t, verdict, r.run(w), "round %d frame %+v (%+v) applied %v", round, w, w.flowFrame(), applied)
		}
		require.Equal(t, want, r.inForce(), "round %d", round)
	}
}

// randomTerms is a random operator list over values below max, drawn near
// the values in vals.
func randomTerms(rng *rand.Rand, max uint64, bitmask bool, vals []uint64) bpf.FlowComponent {
	var c bpf.FlowComponent
	n := 1 + rng.IntN(3)
	for i := range n {
		var t bpf.FlowTerm
		if bitmask {
			t.Op = uint8(rng.IntN(4)) // not, match
			t.Value = rng.Uint64N(max)
		} else {
			t.Op = uint8(rng.IntN(8)) // lt gt eq, all combinations
			t.Value = vals[rng.IntN(len(vals))]
			if rng.IntN(3) == 0 {
				t.Value = rng.Uint64N(max)
			}
		}
		if i > 0 && rng.IntN(2) == 0 {
			t.Op |= bpf.FlowAnd
		}
		c = append(c, t)
	}
	return c
}

var (
	flowAddrs4 = []string{"192.0.2.1", "192.0.2.77", "198.51.100.5", "203.0.113.9"}
	flowAddrs6 = []string{"2001:db8::1", "2001:db8:0:1::5", "2001:db8:1::9", "fe80::1:2"}
	flowPorts  = []uint64{0, 22, 53, 80, 123, 443, 1024, 65535}
	flowLens   = []uint64{64, 90, 100, 400, 468, 1000}
)

func randomRule(rng *rand.Rand, id string) bpf.FlowRule {
	r := bpf.FlowRule{ID: id, IPv6: rng.IntN(2) == 0}
	addrs := flowAddrs4
	if r.IPv6 {
		addrs = flowAddrs6
	}
	prefix := func() *bpf.FlowPrefix {
		a := netip.MustParseAddr(addrs[rng.IntN(len(addrs))])
		bits := []int{8, 16, 24, a.BitLen()}[rng.IntN(4)]
		p := &bpf.FlowPrefix{Prefix: netip.PrefixFrom(a, bits).Masked()}
		if r.IPv6 && rng.IntN(3) == 0 {
			// An offset: the bits before it are zero in the pattern.
			off := uint8(rng.IntN(bits))
			b := a.As16()
			for i := 0; i < int(off); i++ {
				b[i/8] &^= 0x80 >> (i % 8)
			}
			p = &bpf.FlowPrefix{Prefix: netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked(), Offset: off}
		}
		return p
	}
	pick := func() bool { return rng.IntN(4) == 0 }
	if pick() {
		r.Dst = prefix()
	}
	if pick() {
		r.Src = prefix()
	}
	if pick() {
		r.Proto = randomTerms(rng, 256, false, []uint64{1, 6, 17, 58, 47})
	}
	if pick() {
		r.Port = randomTerms(rng, 65536, false, flowPorts)
	}
	if pick() {
		r.DstPort = randomTerms(rng, 65536, false, flowPorts)
	}
	if pick() {
		r.SrcPort = randomTerms(rng, 65536, false, flowPorts)
	}
	if rng.IntN(8) == 0 {
		r.ICMPType = randomTerms(rng, 256, false, []uint64{0, 3, 8, 128, 129})
	}
	if rng.IntN(8) == 0 {
		r.ICMPCode = randomTerms(rng, 256, false, []uint64{0, 1, 3})
	}
	if rng.IntN(6) == 0 {
		r.TCPFlags = randomTerms(rng, 4096, true, nil)
	}
	if pick() {
		r.PacketLength = randomTerms(rng, 65536, false, flowLens)
	}
	if rng.IntN(6) == 0 {
		r.DSCP = randomTerms(rng, 64, false, []uint64{0, 10, 46, 63})
	}
	if rng.IntN(6) == 0 {
		r.Fragment = randomTerms(rng, 16, true, nil)
	}
	if r.IPv6 && rng.IntN(6) == 0 {
		r.FlowLabel = randomTerms(rng, 1<<20, false, []uint64{0, 1, 0x12345, 0xFFFFF})
	}
	switch rng.IntN(3) {
	case 0:
		r.Action = bpf.FlowDrop
	default:
		r.Action = bpf.FlowAccept
	}
	r.Continue = rng.IntN(2) == 0
	return r
}

// randomWire is a random frame, its values often those the rules name.
func randomWire(rng *rand.Rand, rules []bpf.FlowRule) flowWire {
	w := flowWire{v6: rng.IntN(2) == 0}
	addrs := flowAddrs4
	if w.v6 {
		addrs = flowAddrs6
	}
	addr := func() netip.Addr {
		a := netip.MustParseAddr(addrs[rng.IntN(len(addrs))])
		if rng.IntN(3) == 0 {
			b := a.AsSlice()
			b[len(b)-1] ^= byte(rng.IntN(256))
			if rng.IntN(2) == 0 {
				b[len(b)/2] ^= byte(rng.IntN(256))
			}
			a, _ = netip.AddrFromSlice(b)
		}
		return a
	}
	w.src, w.dst = addr(), addr()
	protos := []uint8{frames.ProtoTCP, frames.ProtoUDP, frames.ProtoICMP, frames.ProtoGRE}
	if w.v6 {
		protos[2] = frames.ProtoICMPv6
	}
	w.proto = protos[rng.IntN(len(protos))]
	port := func() uint16 {
		if rng.IntN(3) == 0 {
			return uint16(rng.IntN(65536))
		}
		return uint16(flowPorts[rng.IntN(len(flowPorts))])
	}
	w.sport, w.dport = port(), port()
	w.icmpType, w.icmpCode = []uint8{0, 3, 8, 128, 129}[rng.IntN(5)], uint8(rng.IntN(4))
	w.tcpFlags = uint16(rng.IntN(4096))
	w.dscp = []uint8{0, 10, 46, 63, uint8(rng.IntN(64))}[rng.IntN(5)]
	if w.v6 {
		w.label = []uint32{0, 1, 0x12345, 0xFFFFF, rng.Uint32N(1 << 20)}[rng.IntN(5)]
	}
	w.df = rng.IntN(2) == 0
	if rng.IntN(3) == 0 {
		w.frag = 1 + rng.IntN(3)
	}
	l := int(flowLens[rng.IntN(len(flowLens))])
	if rng.IntN(3) == 0 {
		l = 60 + rng.IntN(1400)
	}
	w.length = uint16(max(l, w.headerRoom()))
	return w
}

// TestFlowSpecBuildTime: 1,024 rules of each family compile and load well
// within the time a BGP update allows.
func TestFlowSpecMaxRules(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	rng := rand.New(rand.NewPCG(1024, 2))
	var rules []bpf.FlowRule
	for i := range 2 * bpf.FlowMaxRules {
		rule := bpf.FlowRule{ID: fmt.Sprintf("m%d", i), IPv6: i%2 == 1, Proto: eq(17), DstPort: eq(uint64(1000 + i/2)), Action: bpf.FlowDrop}
		if i%7 == 0 {
			rule.PacketLength = bpf.FlowComponent{{Op: bpf.FlowGT, Value: uint64(100 + rng.IntN(900))}}
		}
		rules = append(rules, rule)
	}
	start := time.Now()
	r.set(rules...)
	t.Logf("2 x %d rules set in %v", bpf.FlowMaxRules, time.Since(start))
	for _, i := range []int{0, 1, 2, 1000, 2046, 2047} {
		w := udp4("198.51.100.1", "192.0.2.10", 5000, uint16(1000+i/2), 1200)
		if i%2 == 1 {
			w.v6, w.src, w.dst = true, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
		}
		require.Equal(t, xdpDrop, r.run(w), "rule %d", i)
		w.dport = 999
		require.Equal(t, xdpPass, r.run(w), "rule %d", i)
	}
	c := r.counts()
	require.Len(t, c, 2*bpf.FlowMaxRules)
	require.Equal(t, uint64(1), c["m2047"].DroppedPackets)
	require.Equal(t, uint64(0), c["m3"].Packets)
}

// TestFlowSpecLimit: a packet rate admits a tenth of a second of it at one
// instant and as much again a second later; a byte rate likewise in bytes;
// the rest are dropped and counted so.
func TestFlowSpecLimit(t *testing.T) {
	defer bpf.UseLimitClock()()
	r := loadFlow(t, bpf.Policy{})
	bans, err := r.p.Bans()
	require.NoError(t, err)
	r.set(
		bpf.FlowRule{ID: "pps", DstPort: eq(53), Action: bpf.FlowLimit, Rate: 100},
		bpf.FlowRule{ID: "bps", DstPort: eq(54), Action: bpf.FlowLimit, Rate: 10000, RateBytes: true},
	)
	pps := udp4("198.51.100.1", "192.0.2.10", 4000, 53, 86) // 100 bytes a frame
	bps := pps
	bps.dport = 54
	const t0 = uint64(1e12)
	require.NoError(t, bpf.SetBanClock(bans, t0))
	pass := func(w flowWire, n int) int {
		k := 0
		for range n {
			if r.run(w) == xdpPass {
				k++
			}
		}
		return k
	}
	// 100 pps: 10 frames of burst; 10,000 B/s: 1,000 bytes of burst and the frame at its edge.
	require.Equal(t, 10, pass(pps, 25))
	require.Equal(t, 11, pass(bps, 25))
	require.NoError(t, bpf.SetBanClock(bans, t0+1e9))
	require.Equal(t, 10, pass(pps, 25))
	c := r.counts()
	require.Equal(t, bpf.FlowCount{Packets: 50, Bytes: 5000, DroppedPackets: 30, DroppedBytes: 3000}, c["pps"])
	require.Equal(t, bpf.FlowCount{Packets: 25, Bytes: 2500, DroppedPackets: 14, DroppedBytes: 1400}, c["bps"])
}

// TestFlowSpecDryRun: in a dry run a drop rule's frames pass, counted
// dropped (would_drop) by the rule and as drops of their class.
func TestFlowSpecDryRun(t *testing.T) {
	r := loadFlow(t, bpf.Policy{DryRun: true})
	r.set(bpf.FlowRule{ID: "d", Proto: eq(17), Action: bpf.FlowDrop})
	w := udp4("198.51.100.1", "192.0.2.10", 1, 2, 100)
	for range 3 {
		require.Equal(t, xdpPass, r.run(w))
	}
	require.Equal(t, bpf.FlowCount{Packets: 3, Bytes: 342, DroppedPackets: 3, DroppedBytes: 342}, r.counts()["d"])
	var c bpf.Block
	require.NoError(t, r.p.ReadBlock(&c))
	require.Equal(t, uint64(3), c.Class[bpf.IPv4Class(17)][bpf.ActionDrop].Packets)
}

// TestFlowSpecAllowed: an allowed source passes a drop rule, and is not
// counted by it; a banned one is dropped by its ban, not by the rule;
// the others by the rule.
func TestFlowSpecAllowed(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	bans, err := r.p.Bans()
	require.NoError(t, err)
	_, err = bans.SetAllow([]netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")})
	require.NoError(t, err)
	_, err = bans.Ban(netip.MustParsePrefix("203.0.113.0/24"), time.Now().Add(time.Hour), bpf.BanOriginDetect)
	require.NoError(t, err)
	r.set(bpf.FlowRule{ID: "all", Action: bpf.FlowDrop})
	require.Equal(t, xdpPass, r.run(udp4("198.51.100.7", "192.0.2.10", 1, 2, 100)))
	require.Equal(t, xdpDrop, r.run(udp4("203.0.113.7", "192.0.2.10", 1, 2, 100)))
	require.Equal(t, xdpDrop, r.run(udp4("192.0.2.99", "192.0.2.10", 1, 2, 100)))
	require.Equal(t, bpf.FlowCount{Packets: 1, Bytes: 114, DroppedPackets: 1, DroppedBytes: 114}, r.counts()["all"])
}

// TestFlowSpecOrder: the first matching rule decides; with Continue the
// next matching ones apply too (counted), up to FlowChain; an IPv6 prefix
// with an offset is checked exactly.
func TestFlowSpecOrder(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	var rules []bpf.FlowRule
	for i := range 10 {
		rules = append(rules, bpf.FlowRule{ID: fmt.Sprint("c", i), Proto: eq(17), Continue: true})
	}
	rules = append(rules, bpf.FlowRule{ID: "drop", Proto: eq(17), Action: bpf.FlowDrop})
	r.set(rules...)
	require.Equal(t, xdpPass, r.run(udp4("198.51.100.1", "192.0.2.10", 1, 2, 100)), "8 rules applied, the drop not reached")
	c := r.counts()
	for i := range 10 {
		want := uint64(0)
		if i < bpf.FlowChain {
			want = 1
		}
		require.Equal(t, want, c[fmt.Sprint("c", i)].Packets, i)
	}
	r.set(bpf.FlowRule{ID: "off", IPv6: true, Src: &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("::ab00:0/104"), Offset: 96}, Action: bpf.FlowDrop})
	w := flowWire{v6: true, src: netip.MustParseAddr("2001:db8::ab12:3456"), dst: netip.MustParseAddr("2001:db8::1"), proto: frames.ProtoUDP, length: 100}
	require.Equal(t, xdpDrop, r.run(w))
	w.src = netip.MustParseAddr("2001:db8::ac12:3456")
	require.Equal(t, xdpPass, r.run(w))
}

// TestFlowSpecLiveSet: sets replaced while frames run. In set A a frame
// is counted by both its rules and dropped; in set B by the first only and
// passed: a frame decided by a mix would count B's second rule, which no
// whole set does. Right after each Set returns, a frame gets its verdict.
func TestFlowSpecLiveSet(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	w := udp4("198.51.100.1", "192.0.2.10", 1000, 2000, 200)
	setA := []bpf.FlowRule{{ID: "a1", DstPort: eq(2000), Continue: true}, {ID: "a2", Proto: eq(17), Action: bpf.FlowDrop}}
	setB := []bpf.FlowRule{{ID: "b1", SrcPort: eq(1000)}, {ID: "b2", Proto: eq(17), Action: bpf.FlowDrop}}
	stop := make(chan struct{})
	ran := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				ran <- n
				return
			default:
			}
			r.p.XDP().Run(&ebpf.RunOptions{Data: w.build()})
			n++
		}
	}()
	for i := range 40 {
		set, want := setA, xdpDrop
		if i%2 == 1 {
			set, want = setB, xdpPass
		}
		require.NoError(t, r.table.Set(set))
		require.Equal(t, want, r.run(w), "right after set %d", i)
		c := r.counts()
		if i%2 == 1 {
			require.Zero(t, c["b2"].Packets, "B's second rule counted a frame after set %d", i)
			require.NotZero(t, c["b1"].Packets, "set %d", i)
		} else {
			require.NotZero(t, c["a2"].DroppedPackets, "set %d", i)
		}
	}
	close(stop)
	t.Logf("%d frames during 40 sets", <-ran)
}

// TestFlowSpecExemptSessions: a rule that matches every TCP frame drops
// them but the BGP sessions' own: from a peer's address with its port as
// the source port (the host connected out) or the destination port (the
// peer connected in), of either family; the same address with another
// port, or another address with the port, is dropped. Counted exactly.
func TestFlowSpecExemptSessions(t *testing.T) {
	r := loadFlow(t, bpf.Policy{FlowSpec: bpf.FlowSpecConfig{Exempt: []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:179"), netip.MustParseAddrPort("[2001:db8::1]:1179"),
	}}})
	tcp4 := bpf.FlowRule{ID: "tcp4", Proto: eq(6), Action: bpf.FlowDrop}
	tcp6 := bpf.FlowRule{ID: "tcp6", IPv6: true, Proto: eq(6), Action: bpf.FlowDrop}
	r.set(tcp4, tcp6)
	tcp := func(src, dst string, sport, dport uint16) flowWire {
		w := udp4(src, dst, sport, dport, 100)
		w.proto = frames.ProtoTCP
		w.v6 = w.src.Is6()
		return w
	}
	pass := []flowWire{
		tcp("192.0.2.1", "192.0.2.10", 179, 40000),       // the peer's port: connected out
		tcp("192.0.2.1", "192.0.2.10", 40000, 179),       // our listening port: connected in
		tcp("2001:db8::1", "2001:db8::10", 1179, 40000),  // IPv6, the peer's port
		tcp("2001:db8::1", "2001:db8::10", 40001, 1179),  // IPv6, our port
		udp4("192.0.2.1", "192.0.2.10", 179, 40000, 100), // not TCP: no rule for it
	}
	drop := []flowWire{
		tcp("192.0.2.1", "192.0.2.10", 40000, 22),       // the peer, another port
		tcp("192.0.2.2", "192.0.2.10", 179, 40000),      // the port, another address
		tcp("192.0.2.10", "192.0.2.1", 40000, 179),      // to the peer: not its frame
		tcp("2001:db8::1", "2001:db8::10", 179, 40000),  // the IPv4 peer's port, IPv6
		tcp("2001:db8::2", "2001:db8::10", 1179, 40000), // another IPv6 address
		tcp("::ffff:192.0.2.1", "2001:db8::10", 179, 1), // not the IPv4 peer
	}
	var want4, want6 bpf.FlowCount
	for range 3 {
		for _, w := range pass {
			require.Equal(t, xdpPass, r.run(w), "%+v", w)
		}
		for _, w := range drop {
			require.Equal(t, xdpDrop, r.run(w), "%+v", w)
			n := uint64(len(w.build()))
			c := &want4
			if w.v6 {
				c = &want6
			}
			c.Packets++
			c.Bytes += n
			c.DroppedPackets++
			c.DroppedBytes += n
		}
	}
	require.Equal(t, uint64(9), want4.Packets)
	require.Equal(t, uint64(9), want6.Packets)
	require.Equal(t, map[string]bpf.FlowCount{"tcp4": want4, "tcp6": want6}, r.counts())
}

// TestFlowSpecExemptRefused: more sessions than the program holds, or one
// without a port, are refused at load.
func TestFlowSpecExemptRefused(t *testing.T) {
	testns.RequirePrivileged(t)
	many := make([]netip.AddrPort, bpf.FlowExemptMax+1)
	for i := range many {
		many[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), 179)
	}
	_, err := bpf.Load(bpf.Policy{FlowSpec: bpf.FlowSpecConfig{On: true, Exempt: many}})
	require.ErrorContains(t, err, "17 BGP sessions to exempt from the rules; at most 16")
	_, err = bpf.Load(bpf.Policy{FlowSpec: bpf.FlowSpecConfig{On: true, Exempt: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:0")}}})
	require.ErrorContains(t, err, "needs an address and a port")
}

// TestFlowSpecFragmentDF6: an IPv6 rule's fragment component matches with
// its DF bit ignored (RFC 8956 §3.6: reserved, ignored when decoded), in
// the engine and FlowRule.Matches alike; an IPv4 rule's DF is IPv4's
// don't-fragment bit. Counted exactly.
func TestFlowSpecFragmentDF6(t *testing.T) {
	r := loadFlow(t, bpf.Policy{})
	frag := func(op uint8, v uint64) bpf.FlowComponent { return bpf.FlowComponent{{Op: op, Value: v}} }
	v6 := func(fr int) flowWire {
		return flowWire{v6: true, src: netip.MustParseAddr("2001:db8::1"), dst: netip.MustParseAddr("2001:db8::10"),
			proto: frames.ProtoUDP, sport: 1, dport: 2, length: 100, frag: fr}
	}
	whole, first, later := v6(0), v6(1), v6(2)
	df4 := udp4("198.51.100.1", "192.0.2.10", 1, 2, 100)
	df4.df = true
	nodf4 := udp4("198.51.100.1", "192.0.2.10", 1, 2, 100)
	for _, c := range []struct {
		name string
		rule bpf.FlowRule
		drop []flowWire
		pass []flowWire
	}{
		// =DF: the bit ignored leaves no bit to require: every frame.
		{"=DF", bpf.FlowRule{IPv6: true, Fragment: frag(bpf.FlowMatch, bpf.FlowFragDF)}, []flowWire{whole, first, later}, nil},
		// !=DF: not (no bit required): none.
		{"!=DF", bpf.FlowRule{IPv6: true, Fragment: frag(bpf.FlowMatch|bpf.FlowNot, bpf.FlowFragDF)}, nil, []flowWire{whole, first, later}},
		// DF|IsF, any of them: IsF.
		{"DF|IsF", bpf.FlowRule{IPv6: true, Fragment: frag(0, bpf.FlowFragDF|bpf.FlowFragIsF)}, []flowWire{later}, []flowWire{whole, first}},
		// IPv4: DF is the frame's don't-fragment bit.
		{"v4 =DF", bpf.FlowRule{Fragment: frag(bpf.FlowMatch, bpf.FlowFragDF)}, []flowWire{df4}, []flowWire{nodf4}},
	} {
		c.rule.ID, c.rule.Action = "frag", bpf.FlowDrop
		r.set(c.rule)
		var want bpf.FlowCount
		for _, w := range c.drop {
			require.True(t, c.rule.Matches(w.flowFrame()), "%s: Matches %+v", c.name, w)
			require.Equal(t, xdpDrop, r.run(w), "%s: %+v", c.name, w)
			n := uint64(len(w.build()))
			want = bpf.FlowCount{Packets: want.Packets + 1, Bytes: want.Bytes + n, DroppedPackets: want.DroppedPackets + 1, DroppedBytes: want.DroppedBytes + n}
		}
		for _, w := range c.pass {
			require.False(t, c.rule.Matches(w.flowFrame()), "%s: Matches %+v", c.name, w)
			require.Equal(t, xdpPass, r.run(w), "%s: %+v", c.name, w)
		}
		require.Equal(t, want, r.inForce()["frag"], c.name)
		r.set()
		r.counts() // the rule's final counts, gone
	}
}
