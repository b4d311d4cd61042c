//go:build linux

package bpf_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// manyPrefixRules makes 64 rules of n random prefixes each, of every
// length, half of them inside a prefix of an earlier rule (so that rules
// overlap and the closure matters), four of them IPv6 /64s that differ
// from other rules' only in their second word, in the source or
// destination or both.
func manyPrefixRules(rng *rand.Rand, n int) (rules []bpf.Rule, all []netip.Prefix) {
	random := func(v6 bool) netip.Prefix {
		var b [16]byte
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		a := netip.AddrFrom4([4]byte(b[:4]))
		if v6 {
			a = netip.AddrFrom16(b)
		}
		// Mostly longer than a bucket: short prefixes would decide every frame.
		p, _ := a.Prefix(a.BitLen()/4 + rng.IntN(a.BitLen()*3/4+1))
		return p
	}
	inside := func(p netip.Prefix) netip.Prefix {
		a := randomIn(rng, p)
		q, _ := a.Prefix(p.Bits() + rng.IntN(a.BitLen()-p.Bits()+1))
		return q
	}
	rules = make([]bpf.Rule, bpf.MaxRules)
	for i := range rules {
		r := &rules[i]
		r.Name = fmt.Sprintf("r%d", i)
		r.Drop = i%2 == 0
		for k := 0; k < n; k++ {
			var p netip.Prefix
			if len(all) > 0 && rng.IntN(2) == 0 {
				p = inside(all[rng.IntN(len(all))])
			} else {
				p = random(rng.IntN(2) == 0)
			}
			if k < 4 {
				// Siblings: /64s of one /32, alike but for their second word.
				p = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}), 64)
			}
			all = append(all, p)
			switch rng.IntN(3) {
			case 0:
				r.SrcPrefixes = append(r.SrcPrefixes, p)
			case 1:
				r.DstPrefixes = append(r.DstPrefixes, p)
			default:
				r.SrcPrefixes = append(r.SrcPrefixes, p)
				r.DstPrefixes = append(r.DstPrefixes, p)
			}
		}
	}
	return rules, all
}

// randomIn is a random address inside p.
func randomIn(rng *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		if rng.IntN(2) == 1 {
			b[i/8] |= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestRulesManyPrefixes: 64 rules with thousands of overlapping prefixes of
// every length in both directions, each frame's decision as the reference
// gives it, and the exact counters; once with the exact-prefix table as the
// loader sizes it and once with no room to grow, where colliding prefixes
// move their buckets to the trie.
func TestRulesManyPrefixes(t *testing.T) {
	testns.RequirePrivileged(t)
	var tries []int
	for _, c := range []struct {
		name                string
		room, growth, reach int
	}{{"sized", 2, 4, bpf.PrefixProbes}, {"no room", 1, 0, 4}} {
		t.Run(c.name, func(t *testing.T) {
			defer bpf.SetExactRoom(c.room, c.growth, c.reach)()
			rng := rand.New(rand.NewPCG(3, 4))
			rules, all := manyPrefixRules(rng, 60)
			n, err := bpf.TrieBuckets(rules)
			if err != nil {
				t.Fatal(err)
			}
			tries = append(tries, n)
			p, err := bpf.Load(bpf.Policy{Protocols: []uint8{frames.ProtoUDP}, Rules: rules})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			rp := &ruleProgram{name: c.name, policy: bpf.Policy{Protocols: []uint8{frames.ProtoUDP}, Rules: rules}, prog: p}
			matched := 0
			decided := map[int]bool{}
			// An address inside one of ps of family v6, or anywhere.
			pick := func(ps []netip.Prefix, v6 bool) netip.Addr {
				var in []netip.Prefix
				for _, p := range ps {
					if p.Addr().Is6() == v6 {
						in = append(in, p)
					}
				}
				if len(in) == 0 || rng.IntN(5) == 0 {
					in = []netip.Prefix{netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
					if !v6 {
						in = []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
					}
				}
				return randomIn(rng, in[rng.IntN(len(in))])
			}
			for i := 0; i < 3000; i++ {
				// Aimed at a rule: its source and destination prefixes,
				// each missed at times.
				r := rules[rng.IntN(len(rules))]
				v6 := rng.IntN(2) == 0
				src, dst := pick(r.SrcPrefixes, v6), pick(r.DstPrefixes, v6)
				var frame []byte
				if src.Is4() {
					frame = frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), src, dst))
				} else {
					frame = frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(8)), src, dst))
				}
				if r := refRule(frame, rules); r >= 0 {
					matched++
					decided[r] = true
				}
				rp.check(t, frame)
			}
			t.Logf("%d prefixes, %d buckets on the trie; %d of 3000 frames decided by %d rules", len(all), n, matched, len(decided))
			if matched < 1000 || matched > 2900 || len(decided) < 48 {
				t.Fatalf("%d of 3000 frames decided by %d rules: the test must exercise both matches and misses, by many rules", matched, len(decided))
			}
		})
	}
	if len(tries) == 2 && tries[1] <= tries[0] {
		t.Fatalf("with no room in the exact table %d buckets use the trie, as many as with room (%d): the fallback is not exercised", tries[1], tries[0])
	}
}

// TestRulesSiblingPrefixes: exact prefixes that share their home slot and
// differ in one word only, or in their length only, each decide only their
// own frames: the lookup compares every word and the length.
func TestRulesSiblingPrefixes(t *testing.T) {
	testns.RequirePrivileged(t)
	// Where prefixes land is known only for a known key.
	defer bpf.FixHashKey(5)()
	const n = 10 // exact prefixes: four pairs by word, one by length
	rng := rand.New(rand.NewPCG(5, 6))
	base := [16]byte{0x20, 0x01, 0x0d, 0xb8}
	for i := 4; i < 16; i++ {
		base[i] = byte(rng.IntN(256))
	}
	base[15] &^= 1 // the /127 of the length pair keeps it
	var ps []netip.Prefix
	for w := 0; w < 4; w++ {
		base[9] = byte(w) // each pair elsewhere
		p := netip.PrefixFrom(netip.AddrFrom16(base), 128)
		for {
			b := base
			b[4*w+3] = byte(rng.IntN(256)) // past the bucket's 16 bits
			q := netip.PrefixFrom(netip.AddrFrom16(b), 128)
			if q != p && bpf.ExactHome(q, n) == bpf.ExactHome(p, n) {
				ps = append(ps, p, q)
				break
			}
		}
	}
	base[9] = 4
	for {
		base[10] = byte(rng.IntN(256))
		p, q := netip.PrefixFrom(netip.AddrFrom16(base), 127), netip.PrefixFrom(netip.AddrFrom16(base), 128)
		if bpf.ExactHome(p, n) == bpf.ExactHome(q, n) {
			ps = append(ps, q, p) // the /128 first: it decides its address
			break
		}
	}
	var rules []bpf.Rule
	for i, p := range ps {
		rules = append(rules, bpf.Rule{Name: fmt.Sprintf("r%d", i), SrcPrefixes: []netip.Prefix{p}})
	}
	policy := bpf.Policy{Rules: rules}
	p, err := bpf.Load(policy)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rp := &ruleProgram{name: "siblings", policy: policy, prog: p}
	for i, r := range rules {
		a := r.SrcPrefixes[0].Addr()
		if r.SrcPrefixes[0].Bits() == 127 {
			a = a.Next() // inside the /127 only
		}
		frame := frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(8)), a, netip.MustParseAddr("2001:db8::2")))
		if got := refRule(frame, rules); got != i {
			t.Fatalf("reference: rule %d decides the frame of rule %d", got, i)
		}
		rp.check(t, frame)
	}
}
