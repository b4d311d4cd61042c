//go:build linux

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// goldenMul is the multiplier of the exact-prefix hash (2^64 / golden ratio).
const goldenMul = 0x9E3779B97F4A7C15

// unkeyedProduct is the product whose top bits were the home of a source
// IPv4 /32 under the exact-prefix hash as it was before it had a key:
// public and fixed, so a list could be built against it. (length << 32 |
// address) folded, times the golden ratio.
func unkeyedProduct(u uint32) uint64 {
	x := uint64(32)<<32 | uint64(u)
	x ^= x >> 32
	return x * goldenMul
}

// chosenAgainstUnkeyed finds n IPv4 addresses whose homes under the unkeyed
// hash in a table of 1<<bits slots are n consecutive slots: they fit that
// table, but crowd every smaller one, which grew 16-fold for them. Each
// address is found among a + b<<16 by a search of the sorted products of a
// (the hash is linear in the address but for the fold of the constant
// length word).
func chosenAgainstUnkeyed(rng *rand.Rand, n, bits int) []netip.Addr {
	type prod struct {
		p uint64
		a uint32
	}
	lows := make([]prod, 1<<16)
	for a := range lows {
		lows[a] = prod{uint64(a) * goldenMul, uint32(a)}
	}
	slices.SortFunc(lows, func(x, y prod) int {
		switch {
		case x.p < y.p:
			return -1
		case x.p > y.p:
			return 1
		}
		return 0
	})
	width := uint64(1) << (64 - bits)
	first := rng.Uint64() >> (64 - bits) &^ 0xFFF // room for n slots after it
	lenWord := uint64(32) << 32
	base := lenWord * goldenMul // the fold flips bit 5 of the address
	var out []netip.Addr
	for i := 0; len(out) < n; i++ {
		lo := (first + uint64(i)) * width
		for b := uint64(0); b < 1<<16; b++ {
			start := lo - base - b<<16*goldenMul
			j, _ := slices.BinarySearchFunc(lows, start, func(x prod, t uint64) int {
				if x.p < t {
					return -1
				}
				return 1
			})
			if j == len(lows) {
				j = 0
			}
			if lows[j].p-start >= width {
				continue
			}
			u := uint32(b<<16) | lows[j].a
			if unkeyedProduct(u^32)>>(64-bits) != first+uint64(i) {
				panic("chosenAgainstUnkeyed: the search disagrees with the hash")
			}
			var a [4]byte
			binary.BigEndian.PutUint32(a[:], u^32)
			out = append(out, netip.AddrFrom4(a))
			break
		}
	}
	return out
}

// benignPrefixes draws n4 distinct IPv4 /24s and n6 distinct IPv6 /48s (in
// 2000::/8).
func benignPrefixes(rng *rand.Rand, n4, n6 int) []netip.Prefix {
	seen := map[netip.Prefix]bool{}
	var out []netip.Prefix
	for len(out) < n4 {
		p, _ := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256))}).Prefix(24)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for len(out) < n4+n6 {
		var b [16]byte
		b[0] = 0x20
		for i := 1; i < 6; i++ {
			b[i] = byte(rng.IntN(256))
		}
		p := netip.PrefixFrom(netip.AddrFrom16(b), 48)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// exactTableSize is MaxEntries and the kernel memory of the program's
// exact-prefix table.
func exactTableSize(t *testing.T, p *bpf.Program) (slots uint32, memory uint64) {
	t.Helper()
	info, err := p.XDP().Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		mi, err := m.Info()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if mi.Name == "prefix_exact" {
			memory, _ = mi.Memlock()
			return mi.MaxEntries, memory
		}
	}
	t.Fatal("the program has no prefix_exact map")
	return 0, 0
}

// checkRuleMemory checks that p's rule maps take no more kernel memory than
// MaxRuleMemory says any rule set does.
func checkRuleMemory(t *testing.T, p *bpf.Program) {
	t.Helper()
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := p.RuleMemory()
	if err != nil {
		t.Fatal(err)
	}
	if most := bpf.MaxRuleMemory(cpus, false); mem > most {
		t.Fatalf("the rule maps take %d bytes of kernel memory, more than MaxRuleMemory, %d", mem, most)
	}
}

// checkChosen runs frames from every chosen address, from next to each, and
// from random addresses inside and outside the list through rp's program,
// against the reference: verdicts and counters.
func checkChosen(t *testing.T, rng *rand.Rand, rp *ruleProgram, chosen []netip.Addr, list []netip.Prefix) {
	t.Helper()
	dst := netip.MustParseAddr("198.51.100.1")
	frame := func(src netip.Addr) []byte {
		if src.Is4() {
			return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), src, dst))
		}
		return frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(8)), src, netip.MustParseAddr("2001:db8::2")))
	}
	for _, a := range chosen {
		if refRule(frame(a), rp.policy.Rules) != 0 {
			t.Fatalf("reference: %s is not decided by the chosen rule", a)
		}
		rp.check(t, frame(a))
		if next := a.Next(); next.IsValid() {
			rp.check(t, frame(next))
		}
	}
	for range 1000 {
		rp.check(t, frame(randomIn(rng, list[rng.IntN(len(list))])))
		rp.check(t, frame(randomIn(rng, netip.PrefixFrom(netip.IPv4Unspecified(), 0))))
		rp.check(t, frame(randomIn(rng, netip.MustParsePrefix("2000::/8"))))
	}
}

// checkEveryPrefix runs a frame from the first address of every prefix of
// the list (rule 1, pass, under a policy that drops all) through p: each is
// passed, but those of a chosen address (rule 0, drop), and rule 1 counts
// exactly the frames it passed.
func checkEveryPrefix(t *testing.T, p *bpf.Program, list []netip.Prefix, chosen []netip.Addr) {
	t.Helper()
	var before, after bpf.Block
	if err := p.ReadBlock(&before); err != nil {
		t.Fatal(err)
	}
	dst4, dst6 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::2")
	passed := uint64(0)
	for _, pr := range list {
		a := pr.Addr()
		frame := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), a, dst4))
		if a.Is6() {
			frame = frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(8)), a, dst6))
		}
		ret, err := p.XDP().Run(&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(xdpPass)
		if slices.Contains(chosen, a) {
			want = xdpDrop
		} else {
			passed++
		}
		if ret != want {
			t.Fatalf("a frame from %s (prefix %s): verdict %d, want %d", a, pr, ret, want)
		}
	}
	if err := p.ReadBlock(&after); err != nil {
		t.Fatal(err)
	}
	if got := after.Rule[1].Packets - before.Rule[1].Packets; got != passed {
		t.Fatalf("the list's rule counted %d frames, passed %d", got, passed)
	}
}

// TestRulesChosenPrefixes: 64 IPv4 addresses chosen against the exact-prefix
// hash as it was without a key (homes in 64 consecutive slots of a table 16
// times the size it needs, so that every smaller table was too crowded),
// among 100,000 IPv4 and 100,000 IPv6 prefixes, the limit: the table is the
// size the same number of benign prefixes gets (it grew 16-fold, to 268 MB,
// without the key), every prefix decides its frames, and frames from and
// next to the chosen addresses and random ones are decided as the reference
// decides them.
func TestRulesChosenPrefixes(t *testing.T) {
	testns.RequirePrivileged(t)
	const perFamily, chosenN = bpf.MaxPrefixes, 64
	rng := rand.New(rand.NewPCG(20, 2))
	exact := 2 * perFamily // every prefix is longer than a bucket, in a bucket of few lengths
	benignBits := 1
	for 1<<benignBits < 2*exact {
		benignBits++
	}
	chosen := chosenAgainstUnkeyed(rng, chosenN, benignBits+4)
	list := benignPrefixes(rng, perFamily-chosenN, perFamily)
	var chosenPrefixes []netip.Prefix
	for _, a := range chosen {
		chosenPrefixes = append(chosenPrefixes, netip.PrefixFrom(a, 32))
	}
	policy := bpf.Policy{Rules: []bpf.Rule{
		{Name: "chosen", Drop: true, SrcPrefixes: chosenPrefixes},
		{Name: "list", SrcPrefixes: list},
	}, DropAll: true}
	p, err := bpf.Load(policy)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	slots, memory := exactTableSize(t, p)
	benign := uint32(1<<benignBits + bpf.PrefixProbes - 1)
	t.Logf("prefix_exact: %d slots, %.1f MB of kernel memory", slots, float64(memory)/1e6)
	if slots != benign {
		t.Fatalf("prefix_exact has %d slots for %d prefixes, 64 of them chosen against the unkeyed hash: want %d, the size of a benign set's", slots, exact, benign)
	}
	if note := p.PrefixNote(); note != "" {
		t.Fatalf("the chosen prefixes went to the trie, with a key they cannot know: %s", note)
	}
	checkRuleMemory(t, p)
	checkEveryPrefix(t, p, list, chosen)
	checkChosen(t, rng, newRuleProgram("chosen against the unkeyed hash", policy, p), chosen, list)
}

// TestRulesExactTableCeiling: against a key it knows, a list can crowd the
// exact-prefix table; the table then grows at most to its ceiling, twice the
// size a benign set gets, and the prefixes that do not fit move with their
// buckets to the trie: the program decides their frames the same, and
// PrefixNote counts them.
func TestRulesExactTableCeiling(t *testing.T) {
	testns.RequirePrivileged(t)
	const seed = 7
	defer bpf.FixHashKey(seed)()
	rng := rand.New(rand.NewPCG(7, 20))
	list := benignPrefixes(rng, 5000, 5000)
	const chosenN = 64
	exact := len(list) + chosenN
	bits := 1
	for 1<<bits < 2*exact {
		bits++
	}
	// Homes in 64 consecutive slots of a table 16 times the size needed:
	// the table the loader grew to before it had a ceiling.
	chosen := bpf.ChosenAgainstKey(rng, chosenN, bits+4)
	var chosenPrefixes []netip.Prefix
	for _, a := range chosen {
		chosenPrefixes = append(chosenPrefixes, netip.PrefixFrom(a, 32))
	}
	policy := bpf.Policy{Rules: []bpf.Rule{
		{Name: "chosen", Drop: true, SrcPrefixes: chosenPrefixes},
		{Name: "list", SrcPrefixes: list},
	}, DropAll: true}
	trie, err := bpf.TrieBuckets(policy.Rules)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bpf.Load(policy)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	slots, memory := exactTableSize(t, p)
	ceiling := uint32(2<<bits + bpf.PrefixProbes - 1)
	t.Logf("prefix_exact: %d slots (%d KB); %d buckets on the trie; %s", slots, memory/1000, trie, p.PrefixNote())
	if slots > ceiling {
		t.Fatalf("prefix_exact has %d slots for %d prefixes: more than its ceiling, %d", slots, exact, ceiling)
	}
	if trie < chosenN/2 {
		t.Fatalf("%d buckets on the trie: the chosen prefixes must crowd the table past its ceiling", trie)
	}
	prefixes, buckets := bpf.ExactOverflow(p)
	if buckets != trie || prefixes < buckets {
		t.Fatalf("overflow counted as %d prefixes in %d buckets, %d buckets are on the trie", prefixes, buckets, trie)
	}
	checkRuleMemory(t, p)
	want := fmt.Sprintf("%d exact prefixes (in %d buckets) did not fit", prefixes, buckets)
	if note := p.PrefixNote(); len(note) < len(want) || note[:len(want)] != want {
		t.Fatalf("PrefixNote %q, want it to begin %q", note, want)
	}
	checkEveryPrefix(t, p, list, chosen)
	checkChosen(t, rng, newRuleProgram("chosen against a known key", policy, p), chosen, list)
}

// TestRulesMultiBufferKeepsKey: the multi-buffer variant, loaded later on
// the same prefix maps, hashes with the key they were laid out with: it
// finds every exact prefix.
func TestRulesMultiBufferKeepsKey(t *testing.T) {
	testns.RequirePrivileged(t)
	rng := rand.New(rand.NewPCG(21, 2))
	list := benignPrefixes(rng, 1000, 1000)
	policy := bpf.Policy{Rules: []bpf.Rule{{Name: "list", Drop: true, SrcPrefixes: list}}}
	p, err := bpf.Load(policy)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.UseMultiBuffer(); err != nil {
		t.Fatal(err)
	}
	rp := newRuleProgram("multi-buffer", policy, p)
	dst4, dst6 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::2")
	for _, pr := range list {
		a := randomIn(rng, pr)
		frame := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), a, dst4))
		if a.Is6() {
			frame = frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(8)), a, dst6))
		}
		rp.check(t, frame)
	}
}
