package bpf

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
)

// SetExactRoom sets the slots per prefix the exact-prefix table starts
// with, how far it may grow and how far past its home a prefix may be
// placed (at most the program's PREFIX_PROBES), for tests that need
// prefixes to give up on it; the returned func restores them.
func SetExactRoom(room, growth, reach int) (restore func()) {
	oldRoom, oldGrowth, oldReach := exactRoom, maxExactGrowth, exactReach
	exactRoom, maxExactGrowth, exactReach = room, growth, reach
	return func() { exactRoom, maxExactGrowth, exactReach = oldRoom, oldGrowth, oldReach }
}

// TrieBuckets counts the prefix buckets of rules that use the trie.
func TrieBuckets(rules []Rule) (int, error) {
	t, err := compileRules(rules)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range []*prefixTables{&t.src, &t.dst} {
		for _, b := range d.buckets {
			n += int(b.Trie)
		}
	}
	return n, nil
}

// FixHashKey makes every layout until restore use the key drawn from seed,
// for tests that need to know where prefixes land.
func FixHashKey(seed uint64) (restore func()) {
	old := newHashKey
	key := seededKey(seed)
	newHashKey = func() hashKey { return key }
	return func() { newHashKey = old }
}

// seededKey is a hash key drawn from seed.
func seededKey(seed uint64) hashKey {
	rng := rand.New(rand.NewPCG(seed, seed))
	var k hashKey
	for i := range k {
		k[i] = rng.Uint64()
	}
	k[0] |= 1
	return k
}

// ExactHome is the home slot of source prefix p in the exact table the
// loader makes first for n exact prefixes, under the key FixHashKey fixed.
func ExactHome(p netip.Prefix, n int) int {
	key := newHashKey()
	return prefixKey(p).home(&key, uint32(64-bitsFor(exactRoom*n)))
}

// RunEach is runEach, for the external tests.
var RunEach = runEach

// PrefixProbes is how far past its home the program looks for a prefix.
const PrefixProbes = prefixProbes

// UseLimitClock makes the programs loaded until restore take the
// limiter's time from SetLimitClock, and the bans' from SetBanClock,
// instead of the kernel's clock.
func UseLimitClock() (restore func()) {
	limitFakeClock = true
	return func() { limitFakeClock = false }
}

// SetLimitClock sets the time, in ns, of a program loaded under UseLimitClock.
func SetLimitClock(p *Program, ns uint64) error { return p.setLimitClock(ns) }

// ChosenAgainstKey finds n IPv4 addresses whose /32s have homes in n
// consecutive slots of a table of 1<<bits slots under the key FixHashKey
// fixed: what a list built by someone who knew the key could be.
func ChosenAgainstKey(rng *rand.Rand, n, bits int) []netip.Addr {
	key := newHashKey()
	shift := uint32(64 - bits)
	first := rng.IntN(1<<bits - n)
	found := make([]netip.Addr, n)
	left := n
	for left > 0 {
		a := netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
		i := prefixKey(netip.PrefixFrom(a, 32)).home(&key, shift) - first
		if i >= 0 && i < n && !found[i].IsValid() {
			found[i] = a
			left--
		}
	}
	return found
}

// ExactOverflow is how many exact prefixes, in how many buckets, p's
// exact-prefix table left to the trie.
func ExactOverflow(p *Program) (prefixes, buckets int) {
	return p.in.rules.exact.overflowPrefixes, p.in.rules.exact.overflowBuckets
}

// MaxRuleMemory is maxRuleMemory, for the external tests.
var MaxRuleMemory = maxRuleMemory

// ProgramVariants are the feature sets programVariants has a program for.
func ProgramVariants() []Features {
	return slices.Sorted(maps.Keys(programVariants))
}

// ProgramOf is programOf, for the external tests.
var ProgramOf = programOf
