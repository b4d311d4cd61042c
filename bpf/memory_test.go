package bpf

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestMaxRuleMemoryInReadme: the README states the worst case MaxRuleMemory
// computes, the rule counters apart, and what they add per CPU.
func TestMaxRuleMemoryInReadme(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	perCPU := MaxRuleMemory(1, false) - MaxRuleMemory(0, false)
	if perCPU != uint64(unsafe.Sizeof(xdpDropRuleBlock{})) {
		t.Fatalf("the rule counters of one CPU take %d bytes, a block %d", perCPU, unsafe.Sizeof(xdpDropRuleBlock{}))
	}
	for _, want := range []string{
		fmt.Sprintf("%.1f MB", float64(MaxRuleMemory(0, false))/1e6),
		fmt.Sprintf("%.1f KB per CPU", float64(perCPU)/1e3),
		fmt.Sprintf("(%s slots of %d bytes", thousands(maxExactSlots(2*MaxPrefixes)), unsafe.Sizeof(xdpDropPrefixSlot{})),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README.md does not state %q", want)
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
