package bpf

import "unsafe"

// An LPM trie entry takes a node, two child pointers, the prefix length and
// flags (and an rcu_head before Linux 6.13: 40 bytes), the key's address and
// direction and the 8-byte value, allocated as 64 bytes for IPv4 and 96 for
// IPv6; besides its own node an entry adds at most one intermediate node.
const (
	trieEntryV4 = 2 * 64
	trieEntryV6 = 2 * 96
)

// MaxRuleMemory is the most kernel memory the rule maps of any rule set
// within the limits take, on cpus CPUs (with per_queue, every queue slot's
// rule counters): every map at its largest, the exact-prefix table at its
// ceiling for the most exact prefixes there can be and both tries full,
// though no rule set fills both (a prefix is in one or the other).
func MaxRuleMemory(cpus int, perQueue bool) uint64 {
	slots := 1
	if perQueue {
		slots = QueueSlots
	}
	prefixBuckets := 2 * 2 * uintptr(buckets) * unsafe.Sizeof(xdpDropPrefixBucket{})
	exact := uintptr(maxExactSlots(2*MaxPrefixes)) * unsafe.Sizeof(xdpDropPrefixSlot{})
	tries := uintptr(MaxPrefixes * (trieEntryV4 + trieEntryV6))
	ports := 2 * (1 << 16) * unsafe.Sizeof(uint64(0))
	ruleCounters := uintptr(cpus*slots) * unsafe.Sizeof(xdpDropRuleBlock{})
	return uint64(prefixBuckets + exact + tries + ports + ruleCounters)
}
