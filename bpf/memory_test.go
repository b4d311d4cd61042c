package bpf

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// An LPM trie entry takes a node, two child pointers, the prefix length and
// flags (and an rcu_head before Linux 6.13: 40 bytes), the key's address and
// direction and the 8-byte value, allocated as 64 bytes for IPv4 and 96 for
// IPv6; besides its own node an entry adds at most one intermediate node.
const (
	trieEntryV4 = 2 * 64
	trieEntryV6 = 2 * 96
)

// maxExactSlots is the most slots the table of n exact prefixes has.
func maxExactSlots(n int) int {
	return 1<<(bitsFor(exactRoom*n)+maxExactGrowth) + prefixProbes - 1
}

// maxRuleMemory is the most kernel memory the rule maps of any rule set
// within the limits take, on cpus CPUs (with per_queue, every queue slot's
// rule counters): every map at its largest, the exact-prefix table at its
// ceiling for the most exact prefixes there can be and both tries full,
// though no rule set fills both (a prefix is in one or the other).
func maxRuleMemory(cpus int, perQueue bool) uint64 {
	slots := 1
	if perQueue {
		slots = QueueSlots
	}
	prefixBuckets := 2 * 2 * uintptr(buckets) * unsafe.Sizeof(xdpDropPrefixBucket{})
	exact := uintptr(maxExactSlots(2*MaxPrefixes)) * unsafe.Sizeof(xdpDropPrefixSlot{})
	tries := uintptr(MaxPrefixes * (trieEntryV4 + trieEntryV6))
	ports := 2 * (1 << 16) * unsafe.Sizeof(uint64(0))
	ruleCounters := uintptr(cpus*slots) * unsafe.Sizeof(xdpDropRuleBlock{})
	limiter := uintptr(LimitMemory)
	return uint64(prefixBuckets + exact + tries + ports + ruleCounters + limiter)
}

// TestMaxRuleMemoryInDocs: docs/rules.md states the worst case maxRuleMemory
// computes, the rule counters apart, and what they add per CPU.
func TestMaxRuleMemoryInDocs(t *testing.T) {
	readme, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	perCPU := maxRuleMemory(1, false) - maxRuleMemory(0, false)
	if perCPU != uint64(unsafe.Sizeof(xdpDropRuleBlock{})) {
		t.Fatalf("the rule counters of one CPU take %d bytes, a block %d", perCPU, unsafe.Sizeof(xdpDropRuleBlock{}))
	}
	for _, want := range []string{
		fmt.Sprintf("%.1f MB", float64(maxRuleMemory(0, false))/1e6),
		fmt.Sprintf("%.1f KB per CPU", float64(perCPU)/1e3),
		fmt.Sprintf("(%s slots of %d bytes", thousands(maxExactSlots(2*MaxPrefixes)), unsafe.Sizeof(xdpDropPrefixSlot{})),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/rules.md does not state %q", want)
		}
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
