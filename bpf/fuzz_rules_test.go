//go:build linux

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// The rule side of the reference, from the design: a rule matches an IP
// frame whose headers are whole when every condition it has holds; the
// first rule that matches decides. Prefixes are checked by containment,
// rule by rule, not with tries and masks as the program does.

// refFrame is what rules look at in a frame: its family, protocol,
// addresses, and ports when the frame carries them in its first buffer.
type refFrame struct {
	proto        uint8
	src, dst     netip.Addr
	ports        bool
	sport, dport uint16
}

// refRuleFrame reads a frame as rules see it; ok is false for frames that
// no rule can match (not IP, or headers cut short).
func refRuleFrame(frame []byte) (f refFrame, ok bool) {
	r, off, ok := refIP(frame)
	if !ok {
		return f, false
	}
	pkt := frame[off:]
	f.proto = uint8(r.proto)
	var l4 []byte
	if r.family == bpf.FamilyIPv4 {
		f.src = netip.AddrFrom4([4]byte(pkt[12:16]))
		f.dst = netip.AddrFrom4([4]byte(pkt[16:20]))
		if binary.BigEndian.Uint16(pkt[6:])&0x1fff == 0 { // not a later fragment
			l4 = pkt[int(pkt[0]&0x0f)*4:]
		}
	} else {
		f.src = netip.AddrFrom16([16]byte(pkt[8:24]))
		f.dst = netip.AddrFrom16([16]byte(pkt[24:40]))
		l4 = refIPv6Payload(pkt)
	}
	if len(l4) >= 4 {
		f.ports = true
		f.sport = binary.BigEndian.Uint16(l4)
		f.dport = binary.BigEndian.Uint16(l4[2:])
	}
	return f, true
}

// refIP classifies frame and finds its IP header; ok is false for frames
// that no rule can match (not IP, or headers cut short).
func refIP(frame []byte) (r refResult, off int, ok bool) {
	r = refClassify(frame)
	if r.proto < 0 || r.family == bpf.FamilyL2 {
		return r, 0, false
	}
	off = ethHeaderLen
	for et := binary.BigEndian.Uint16(frame[12:]); et == 0x8100 || et == 0x88A8; et = binary.BigEndian.Uint16(frame[off-2:]) {
		off += vlanTagLen
	}
	return r, off, true
}

// refIPv6Payload is what follows the extension headers refIPv6 skips, nil
// for a later fragment, which carries no upper-layer header.
func refIPv6Payload(pkt []byte) []byte {
	next := pkt[6]
	rest := pkt[ipv6HeaderLen:]
	for skipped := 0; skipped < ipv6ExtMax && isIPv6Ext(next); skipped++ {
		size := ipv6ExtSize(next, rest)
		if next == 44 && binary.BigEndian.Uint16(rest[2:])>>3 != 0 {
			return nil
		}
		next = rest[0]
		rest = rest[size:]
	}
	return rest
}

func refPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	if len(ps) == 0 {
		return true
	}
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

func refPorts(rs []bpf.PortRange, f refFrame, port uint16) bool {
	if len(rs) == 0 {
		return true
	}
	return f.ports && slices.ContainsFunc(rs, func(r bpf.PortRange) bool { return r.Lo <= port && port <= r.Hi })
}

// refIndex finds a rule's prefixes containing an address as refPrefixes
// does, rule by rule, but for long lists by looking the address's prefix of
// each length the list has up in a set: a scan of thousands of prefixes
// per frame would slow fuzzing down.
type refIndex map[*netip.Prefix]*refList

type refList struct {
	lens4, lens6 []int
	set          map[netip.Prefix]bool
}

// refIndexFrom is the lists of rules long enough to index.
func refIndexFrom(rules []bpf.Rule) refIndex {
	idx := refIndex{}
	for _, r := range rules {
		for _, ps := range [][]netip.Prefix{r.SrcPrefixes, r.DstPrefixes} {
			if len(ps) < 32 {
				continue
			}
			l := &refList{set: map[netip.Prefix]bool{}}
			for _, p := range ps {
				lens := &l.lens6
				if p.Addr().Is4() {
					lens = &l.lens4
				}
				if !slices.Contains(*lens, p.Bits()) {
					*lens = append(*lens, p.Bits())
				}
				l.set[p] = true
			}
			idx[unsafe.SliceData(ps)] = l
		}
	}
	return idx
}

func (idx refIndex) prefixes(ps []netip.Prefix, a netip.Addr) bool {
	l := idx[unsafe.SliceData(ps)]
	if l == nil {
		return refPrefixes(ps, a)
	}
	lens := l.lens6
	if a.Is4() {
		lens = l.lens4
	}
	for _, n := range lens {
		if p, err := a.Prefix(n); err == nil && l.set[p] {
			return true
		}
	}
	return false
}

// refRule is the index of the first rule that matches frame, -1 for none.
func refRule(frame []byte, rules []bpf.Rule) int { return refRuleIndexed(frame, rules, nil) }

// refRuleIndexed is refRule with the long prefix lists of rules in idx.
func refRuleIndexed(frame []byte, rules []bpf.Rule, idx refIndex) int {
	f, ok := refRuleFrame(frame)
	if !ok {
		return -1
	}
	for i, r := range rules {
		hasPorts := len(r.SrcPorts)+len(r.DstPorts) > 0
		if (len(r.Protocols) == 0 || slices.Contains(r.Protocols, f.proto)) &&
			idx.prefixes(r.SrcPrefixes, f.src) && idx.prefixes(r.DstPrefixes, f.dst) &&
			(!hasPorts || f.ports) && refPorts(r.SrcPorts, f, f.sport) && refPorts(r.DstPorts, f, f.dport) {
			return i
		}
	}
	return -1
}

// refDecision is the rule that decides frame (-1: none), whether the
// frame is counted as dropped, and the XDP action it gets; idx may index
// the long prefix lists of p's rules.
func refDecision(frame []byte, r refResult, p bpf.Policy, idx refIndex) (rule int, drop bool, verdict uint32) {
	rule = refRuleIndexed(frame, p.Rules, idx)
	if rule >= 0 {
		drop = p.Rules[rule].Drop
	} else {
		drop = p.Drops(r.class())
	}
	verdict = xdpPass
	if drop && !p.DryRun {
		verdict = xdpDrop
	}
	return rule, drop, verdict
}

// TestReferenceRulesMatchTable holds the rule reference to the hand-written
// rule table, so a reference bug shows without root.
func TestReferenceRulesMatchTable(t *testing.T) {
	for _, set := range ruleSets() {
		for _, c := range set.cases {
			r := refClassify(c.frame)
			require.Equal(t, c.class, r.class(), "%s: %s", set.name, c.name)
			rule, drop, _ := refDecision(c.frame, r, set.policy, nil)
			want := -1
			for i, rl := range set.policy.Rules {
				if rl.Name == c.rule {
					want = i
				}
			}
			require.Equal(t, want, rule, "%s: %s: rule", set.name, c.name)
			require.Equal(t, c.drop, drop, "%s: %s: action", set.name, c.name)
		}
	}
}

// Address and port pools random rules draw from: the builders' defaults
// (192.0.2.1 → 192.0.2.2, 2001:db8::1 → ::2, ports 40000 → 9), so that
// fuzzed frames match them often, and a few others.
var (
	fuzzAddrs = []netip.Addr{
		netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("10.1.2.3"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8:ff::7"),
	}
	fuzzPorts         = []uint16{0, 9, 53, 40000, 65535}
	fuzzRuleProtocols = []uint8{frames.ProtoTCP, frames.ProtoUDP, frames.ProtoSCTP, 136, frames.ProtoICMP, frames.ProtoICMPv6, frames.ProtoGRE}
)

// randomRules makes a rule set of 1 to 64 rules, each with at least one
// condition, drawn around the pools.
func randomRules(rng *rand.Rand) []bpf.Rule {
	n := 1 + rng.IntN(8)
	if rng.IntN(4) == 0 {
		n = 1 + rng.IntN(bpf.MaxRules)
	}
	rules := make([]bpf.Rule, n)
	for i := range rules {
		r := &rules[i]
		r.Name = "r" + strconv.Itoa(i)
		r.Drop = rng.IntN(2) == 0
		for len(r.Protocols)+len(r.SrcPrefixes)+len(r.DstPrefixes)+len(r.SrcPorts)+len(r.DstPorts) == 0 {
			portsOnly := rng.IntN(2) == 0
			if rng.IntN(2) == 0 {
				pool := fuzzRuleProtocols
				if portsOnly {
					pool = bpf.PortProtocols
				}
				for k := 1 + rng.IntN(3); k > 0; k-- {
					if p := pool[rng.IntN(len(pool))]; !slices.Contains(r.Protocols, p) {
						r.Protocols = append(r.Protocols, p)
					}
				}
			}
			r.SrcPrefixes = randomPrefixes(rng)
			r.DstPrefixes = randomPrefixes(rng)
			if portsOnly && len(r.Protocols) > 0 {
				r.SrcPorts = randomPorts(rng)
				r.DstPorts = randomPorts(rng)
			}
		}
		if rng.IntN(4) == 0 {
			r.Drop, r.Limit = false, randomLimit(rng)
		}
	}
	return rules
}

func randomPrefixes(rng *rand.Rand) []netip.Prefix {
	var ps []netip.Prefix
	for k := rng.IntN(4) - 1; k > 0; k-- {
		a := fuzzAddrs[rng.IntN(len(fuzzAddrs))]
		p, _ := a.Prefix(rng.IntN(a.BitLen() + 1))
		ps = append(ps, p)
	}
	return ps
}

// Lengths at word and bucket boundaries, where masks and keys change shape.
var (
	edgeLens4 = []int{0, 8, 15, 16, 17, 24, 31, 32}
	edgeLens6 = []int{0, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 97, 127, 128}
)

// manyPrefixes draws n prefixes around the pool addresses, for rule sets
// whose exact-prefix table is large: lengths from a palette of 2 to 8 per
// family (a bucket takes 6 before it goes to the trie), and addresses that
// keep a pool address's first 8 bits or more, often all it has up to the
// length (containing it, so that fuzzed frames hit them). Some are drawn
// inside or around another, so that prefixes nest.
func manyPrefixes(rng *rand.Rand, n int) []netip.Prefix {
	palette := func(edge []int, bits int) []int {
		var lens []int
		for k := 2 + rng.IntN(7); k > 0; k-- {
			if rng.IntN(2) == 0 {
				lens = append(lens, edge[rng.IntN(len(edge))])
			} else {
				lens = append(lens, 17+rng.IntN(bits-16))
			}
		}
		return lens
	}
	lens4, lens6 := palette(edgeLens4, 32), palette(edgeLens6, 128)
	ps := make([]netip.Prefix, 0, n)
	for len(ps) < n {
		a := fuzzAddrs[rng.IntN(len(fuzzAddrs))]
		if len(ps) > 0 && rng.IntN(4) == 0 {
			a = ps[rng.IntN(len(ps))].Addr()
		}
		lens := lens6
		if a.Is4() {
			lens = lens4
		}
		bits := lens[rng.IntN(len(lens))]
		// The bits kept: up to the length (containing a), or fewer,
		// at least the bucket's most of the time.
		keep := bits
		switch rng.IntN(4) {
		case 0:
			keep = 8 + rng.IntN(a.BitLen()-7) // in another bucket, often
		case 1:
			keep = 16 + rng.IntN(a.BitLen()-15)
		}
		b := a.AsSlice()
		for i := keep; i < len(b)*8; i++ {
			if rng.IntN(2) == 0 {
				b[i/8] ^= 0x80 >> (i % 8)
			}
		}
		na, _ := netip.AddrFromSlice(b)
		p, _ := na.Prefix(bits)
		ps = append(ps, p)
	}
	return ps
}

// enlargeRules inserts one to eight rules among rules, each with
// prefixes of one direction only (the source for a rule that drops), and shares hundreds to thousands of
// prefixes among them: prefixes nest across rules, so that a lookup that
// finds the wrong one decides another rule, or none.
func enlargeRules(rng *rand.Rand, rules []bpf.Rule) []bpf.Rule {
	if len(rules) == bpf.MaxRules {
		rules = rules[:bpf.MaxRules-1]
	}
	var added []int
	for k := 1 + rng.IntN(min(8, bpf.MaxRules-len(rules))); k > 0; k-- {
		at := rng.IntN(len(rules) + 1)
		rules = slices.Insert(rules, at, bpf.Rule{Drop: rng.IntN(2) == 0})
		for j := range added {
			if added[j] >= at {
				added[j]++
			}
		}
		added = append(added, at)
	}
	for i, p := range manyPrefixes(rng, 200+rng.IntN(2000)) {
		at := added[rng.IntN(len(added))]
		if i < len(added) {
			at = added[i] // every rule gets a condition
		}
		r := &rules[at]
		if r.Drop {
			r.SrcPrefixes = append(r.SrcPrefixes, p)
		} else {
			r.DstPrefixes = append(r.DstPrefixes, p)
		}
	}
	for i := range rules {
		rules[i].Name = "r" + strconv.Itoa(i)
	}
	return rules
}

func randomPorts(rng *rand.Rand) []bpf.PortRange {
	var rs []bpf.PortRange
	for k := rng.IntN(4) - 1; k > 0; k-- {
		p := fuzzPorts[rng.IntN(len(fuzzPorts))]
		lo, hi := int(p)-rng.IntN(3), int(p)+rng.IntN(3)
		rs = append(rs, bpf.PortRange{Lo: uint16(max(lo, 0)), Hi: uint16(min(hi, 65535))})
	}
	return rs
}

// fuzzRuleSeed seeds the random rule sets: XDP_DROP_FUZZ_RULES_SEED to
// repeat a run, the time otherwise.
func fuzzRuleSeed() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("XDP_DROP_FUZZ_RULES_SEED"), 10, 64); err == nil {
		return s
	}
	return uint64(time.Now().UnixNano())
}

type ruleProgram struct {
	name          string
	policy        bpf.Policy
	prog          *bpf.Program
	before, after bpf.Block
	ref           refIndex // nil: the reference scans every prefix
	budgets       refBudgets
	// aim are the prefixes of the long lists of ref, by direction and
	// family (source and IPv4 first), which steer sends frames into.
	aim [2][2][]netip.Prefix
}

// newRuleProgram indexes the long prefix lists of policy for the reference
// and for steer.
func newRuleProgram(name string, policy bpf.Policy, prog *bpf.Program) *ruleProgram {
	rp := &ruleProgram{name: name, policy: policy, prog: prog, ref: refIndexFrom(policy.Rules), budgets: refBudgets{}}
	for _, r := range policy.Rules {
		for dir, ps := range [][]netip.Prefix{r.SrcPrefixes, r.DstPrefixes} {
			if rp.ref[unsafe.SliceData(ps)] == nil {
				continue
			}
			for _, p := range ps {
				f := 1
				if p.Addr().Is4() {
					f = 0
				}
				rp.aim[dir][f] = append(rp.aim[dir][f], p)
			}
		}
	}
	return rp
}

// steer is frame with its source or destination address moved into one
// of rp.aim, both chosen by a hash of frame, keeping the address's bits
// past the prefix: fuzzed frames seldom fall into a random prefix of a
// large table by themselves. ok is false when the frame is not IP with
// whole headers, or aim has no prefix of its family.
func (rp *ruleProgram) steer(frame []byte) (steered []byte, ok bool) {
	r, off, ok := refIP(frame)
	if !ok {
		return nil, false
	}
	h := fnv.New64a()
	h.Write(frame)
	sum := h.Sum64()
	dir, f, at, size := int(sum>>63), 0, off+12, 4
	if r.family == bpf.FamilyIPv6 {
		f, at, size = 1, off+8, 16
	}
	aim := rp.aim[dir][f]
	if len(aim) == 0 {
		dir = 1 - dir
		if aim = rp.aim[dir][f]; len(aim) == 0 {
			return nil, false
		}
	}
	p := aim[sum%uint64(len(aim))]
	at += dir * size
	steered = slices.Clone(frame)
	pb := p.Addr().AsSlice()
	for i := 0; i < p.Bits(); i++ {
		bit := byte(0x80 >> (i % 8))
		steered[at+i/8] = steered[at+i/8]&^bit | pb[i/8]&bit
	}
	return steered, true
}

// check runs frame through the program and requires the reference's
// verdict, and that exactly the reference's class under its action, and
// the reference's rule, counted one packet of the frame.
func (rp *ruleProgram) check(t *testing.T, frame []byte) { rp.checkSplit(t, frame, 0) }

// checkSplit is check with the frame's first linear bytes in the first
// buffer and the rest in fragments (0: all of it in one buffer), against
// the reference applied to the first buffer, where the program reads
// headers and ports: ports past it are absent.
func (rp *ruleProgram) checkSplit(t *testing.T, frame []byte, linear int) {
	t.Helper()
	first := frame
	if linear > 0 {
		first = frame[:linear]
	}
	r := refClassify(first)
	rule, drop, want := refDecision(first, r, rp.policy, rp.ref)
	limited := rp.refLimit(first, rule, &drop, &want)
	require.NoError(t, rp.prog.ReadBlock(&rp.before))
	verdict, err := runSplit(rp.prog.XDP(), frame, linear)
	require.NoError(t, err)
	require.NoError(t, rp.prog.ReadBlock(&rp.after))

	expect := rp.before
	action := bpf.ActionPass
	if drop {
		action = bpf.ActionDrop
	}
	one := func(c *bpf.Counter) {
		c.Packets++
		c.Bytes += uint64(len(frame))
	}
	one(&expect.Class[r.class()][action])
	if rule >= 0 {
		one(&expect.Rule[rule])
	}
	if limited {
		one(&expect.Limited[rule])
	}
	if verdict != want || expect != rp.after {
		t.Fatalf("%s: frame %s (%d bytes in the first buffer, 0: all): verdict %d, reference %d (rule %d, drop %v, class %d); counters as the reference: %v",
			rp.name, hexFrame(frame), linear, verdict, want, rule, drop, r.class(), expect == rp.after)
	}
}

// firstBufferOf is where a frame is split for a multi-buffer program: a
// hash of the frame picks a first buffer of at least an Ethernet header
// and less than the frame, so that headers and ports fall on both sides of
// the split.
func firstBufferOf(frame []byte) int {
	h := fnv.New64a()
	h.Write(frame)
	return ethHeaderLen + int(h.Sum64()%uint64(len(frame)-ethHeaderLen))
}

// FuzzRules feeds frames to programs with random rule sets (drawn anew
// every run from the seed it logs) and to the reference, and requires the
// same verdict, class, action and rule counts. The multi-buffer programs
// get each frame whole in one buffer, and split in two.
func FuzzRules(f *testing.F) {
	testns.RequirePrivileged(f)
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	for _, set := range ruleSets() {
		for _, c := range set.cases {
			f.Add(c.frame)
		}
	}
	seed := fuzzRuleSeed()
	rng := rand.New(rand.NewPCG(seed, seed))
	// Limit rules run on the test clock, which stays put (see refBudgets).
	restoreClock := bpf.UseLimitClock()
	defer restoreClock()
	var progs []*ruleProgram
	for i := 0; i < 6; i++ {
		policy := bpf.Policy{Rules: randomRules(rng)}
		// Half the sets are large; one in four of those is laid out
		// with no room to spare, so that many buckets give up on the exact
		// table for the trie.
		large, tight := rng.IntN(2) == 0, rng.IntN(4) == 0
		if large {
			policy.Rules = enlargeRules(rng, policy.Rules)
		}
		switch i % 3 {
		case 1:
			policy.Protocols = fuzzProtocols
		case 2:
			policy.DropAll, policy.DryRun = true, i == 5
		}
		restore := func() {}
		if large && tight {
			restore = bpf.SetExactRoom(1, 0, 4)
		}
		p, err := bpf.Load(policy)
		restore()
		if err != nil {
			f.Fatalf("load rule set %d (seed %d): %v", i, seed, err)
		}
		f.Cleanup(func() { p.Close() })
		if i%2 == 1 {
			if err := p.UseMultiBuffer(); err != nil {
				f.Fatal(err)
			}
		}
		progs = append(progs, newRuleProgram(fmt.Sprintf("rule set %d of seed %d (XDP_DROP_FUZZ_RULES_SEED)", i, seed), policy, p))
	}

	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < ethHeaderLen {
			t.Skip("BPF_PROG_TEST_RUN rejects frames shorter than an Ethernet header")
		}
		if len(frame) > fuzzMaxFrame {
			t.Skip("longer than the linear test_run buffer")
		}
		for _, rp := range progs {
			rp.check(t, frame)
			steered, ok := rp.steer(frame)
			if ok {
				rp.check(t, steered)
			}
			// Half the inputs, split, the steered frame where there is one:
			// an input stays about as cheap as before splits and steering.
			if rp.prog.MultiBuffer() && len(frame) > ethHeaderLen && frame[len(frame)-1]%2 == 0 {
				split := frame
				if ok {
					split = steered
				}
				rp.checkSplit(t, split, firstBufferOf(split))
			}
		}
	})
}
