package bpf

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
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
	ruleCounters := uint64(cpus*slots) * uint64(unsafe.Sizeof(xdpDropRuleBlock{}))
	return ruleMapMemory(2*2*buckets, maxExactSlots(2*MaxPrefixes), MaxPrefixes, MaxPrefixes, 2*(1<<16), int(xdpDropLimitLimitsLIMIT_CELLS)) + ruleCounters
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
