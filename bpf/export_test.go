package bpf

import "net/netip"

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

// ExactHome is the home slot of source prefix p in the exact table the
// loader makes first for n exact prefixes.
func ExactHome(p netip.Prefix, n int) int {
	return prefixKey(p).home(uint32(64 - bitsFor(exactRoom*n)))
}

// RunEach is runEach, for the external tests.
var RunEach = runEach

// PrefixProbes is how far past its home the program looks for a prefix.
const PrefixProbes = prefixProbes

// UseLimitClock makes the programs loaded until restore take the
// limiter's time from SetLimitClock instead of the kernel's clock.
func UseLimitClock() (restore func()) {
	limitFakeClock = true
	return func() { limitFakeClock = false }
}

// SetLimitClock sets the time, in ns, of a program loaded under UseLimitClock.
func SetLimitClock(p *Program, ns uint64) error { return p.setLimitClock(ns) }
