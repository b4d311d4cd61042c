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

// Footprint is what a policy's rules compile to and the most kernel memory
// its maps take, known before anything is loaded.
type Footprint struct {
	// Entries of the rule maps an instance loads once and its interfaces
	// share: prefix buckets, exact-prefix slots, trie entries by family,
	// port masks, limiter cells (0 without limit rules).
	PrefixBuckets, ExactSlots, TrieV4, TrieV6, PortMasks, LimitCells int
	// PrefixesV4 and PrefixesV6 are the rules' prefixes by family, both
	// directions, as compiled.
	PrefixesV4, PrefixesV6 int
	// RuleMaps is the most kernel memory the rule maps take, once per
	// instance; 0 without rules.
	RuleMaps uint64
	// FlowSpecMaps is the most kernel memory the FlowSpec maps take, once
	// per instance (FlowSpecMemory's shared); 0 without FlowSpec.
	FlowSpecMaps uint64
	// PerCPU is the counters of one interface on one CPU: the class
	// counters and, with rules, the rule counters, per queue slot; with
	// FlowSpec, its counters and scratch (FlowSpecMemory's perCPU).
	PerCPU uint64
	// Ring is the sample ring of one interface; 0 without sampling.
	Ring uint64
}

// FootprintOf compiles the policy's rules as a load does and sizes its maps
// from them: the figures are those of the maps a load would create, each
// map at its most (see ruleMapMemory).
func FootprintOf(policy Policy) (Footprint, error) {
	rules, err := compileRules(policy.Rules)
	if err != nil {
		return Footprint{}, err
	}
	f := Footprint{PerCPU: uint64(policy.queueSlots()) * uint64(unsafe.Sizeof(xdpDropCounterBlock{}))}
	if policy.Sample.On() {
		f.Ring = uint64(policy.Sample.RingSize())
	}
	if policy.FlowSpec.On {
		shared, perCPU := FlowSpecMemory(policy.FlowSpec.MaxRules)
		f.FlowSpecMaps = shared
		f.PerCPU += perCPU
	}
	if rules.count == 0 {
		return f, nil
	}
	f.PerCPU += uint64(policy.queueSlots()) * uint64(unsafe.Sizeof(xdpDropRuleBlock{}))
	f.PrefixBuckets = rules.buckets()
	f.ExactSlots = len(rules.exact.slots)
	f.TrieV4 = len(rules.src.trie4) + len(rules.dst.trie4)
	f.TrieV6 = len(rules.src.trie6) + len(rules.dst.trie6)
	f.PortMasks = len(rules.srcPort) + len(rules.dstPort)
	if policy.hasLimits() {
		f.LimitCells = int(xdpDropLimitLimitsLIMIT_CELLS)
	}
	f.PrefixesV4, f.PrefixesV6 = rules.prefixesV4, rules.prefixesV6
	f.RuleMaps = ruleMapMemory(f.PrefixBuckets, f.ExactSlots, f.TrieV4, f.TrieV6, f.PortMasks, f.LimitCells)
	return f, nil
}

// ruleMapMemory is the most kernel memory rule maps of these entries take:
// arrays of their entries, the tries at trieEntryV4 and trieEntryV6 bytes
// an entry. The README's worst case is this at the limits.
func ruleMapMemory(buckets, exactSlots, trieV4, trieV6, portMasks, limitCells int) uint64 {
	return uint64(buckets)*uint64(unsafe.Sizeof(xdpDropPrefixBucket{})) +
		uint64(exactSlots)*uint64(unsafe.Sizeof(xdpDropPrefixSlot{})) +
		uint64(trieV4)*trieEntryV4 + uint64(trieV6)*trieEntryV6 +
		uint64(portMasks)*uint64(unsafe.Sizeof(uint64(0))) +
		uint64(limitCells)*8
}

// BanMapMemory is the most kernel memory the ban maps of a policy with
// this max take (0 is DefaultBanMax), before anything is loaded: 3 MiB of
// buckets and filter (and 16 KiB of headers), and up to 184 bytes an IPv4 entry and 200 an IPv6
// one (every origin's claim and a limit's rate included), for max bans and MaxBanAllow allowed
// prefixes a family (the kernel accounts a little less: 44.6 MB at the
// default; BanTable.Memory).
func BanMapMemory(max int) uint64 {
	if max == 0 {
		max = DefaultBanMax
	}
	return 3<<20 + 16<<10 + uint64(max+MaxBanAllow)*(184+200)
}

// FlowSpecMemory is the most kernel memory the FlowSpec maps of an
// instance take for maxRules a family (0 is FlowMaxRules), before anything
// is loaded, and the counters of one interface on one CPU (perCPU): the
// class tables of both generations and families (4 x 534 KiB, whatever
// the rules), the rows (16 per rule and 64 a generation and family, a
// word per 64 rules each), the rules, the cells, the prefix tries at their
// most, the handover records (two 1 KiB chunks per slot at most) and the
// peers' states (16 records of 1 KiB).
func FlowSpecMemory(maxRules int) (shared, perCPU uint64) {
	lay := newFlowLayout(maxRules)
	const tableSize = uint64(unsafe.Sizeof(xdpDropFsTable{}))
	shared = 4*tableSize +
		uint64(4*lay.rows*lay.words*8) +
		uint64(4*lay.max)*uint64(unsafe.Sizeof(xdpDropFsRule{})) +
		uint64(lay.slots())*uint64(unsafe.Sizeof(xdpDropFsCell{})) +
		uint64(4*lay.max)*(trieEntryV4+trieEntryV6) +
		uint64(lay.slots())*2*(1024+64) +
		FlowMaxPeers*flowPeerRecord // the peers' states, for a view
	perCPU = uint64(lay.slots())*uint64(unsafe.Sizeof(xdpDropFsCount{})) + uint64(unsafe.Sizeof(xdpDropFsScratch{}))
	return shared, perCPU
}
