//go:build linux

package bpf

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// embeddedSpec parses the embedded ELF once; every load works on a copy.
var embeddedSpec = sync.OnceValues(loadXdpDrop)

// spec returns a copy of the program's spec set up for the instance's
// policy (see specFor).
func (in *Instance) spec() (*ebpf.CollectionSpec, error) {
	rules, err := in.compiled()
	if err != nil {
		return nil, err
	}
	return in.specOf(rules)
}

// specOf is spec for the instance's compiled rules.
func (in *Instance) specOf(rules *ruleTables) (*ebpf.CollectionSpec, error) {
	parsed, err := embeddedSpec()
	if err != nil {
		return nil, fmt.Errorf("read embedded XDP program: %w", err)
	}
	return specFor(parsed, in.policy, rules)
}

// specFor returns a copy of parsed set up for policy and its compiled
// rules: the programs of the policy's kind, the verdict table, the queue
// slots and the counter map's size, the rules' constants and map sizes.
// The rule maps' contents are filled after load (loadRuleMaps). A feature
// that adds maps or programs sets them up in a step of its own here.
func specFor(parsed *ebpf.CollectionSpec, policy Policy, rules *ruleTables) (*ebpf.CollectionSpec, error) {
	spec, err := programsFor(parsed, featuresOf(policy))
	if err != nil {
		return nil, err
	}
	if err := checkClasses(spec); err != nil {
		return nil, err
	}
	if err := setConstants(spec, policy, rules); err != nil {
		return nil, err
	}
	sizeCounters(spec, policy, rules)
	sizeRuleMaps(spec, rules)
	if err := setSampling(spec, policy.Sample); err != nil {
		return nil, err
	}
	if err := setLimitSpec(spec, policy); err != nil {
		return nil, err
	}
	if err := setBanSpec(spec, policy); err != nil {
		return nil, err
	}
	if err := setFlowSpec(spec, policy); err != nil {
		return nil, err
	}
	return spec, nil
}

// programsFor copies parsed with the two programs of the features f
// (programVariants), single- and multi-buffer, under the names of the
// programs without features and with the one kernel name; the programs it
// cannot need are not copied.
func programsFor(parsed *ebpf.CollectionSpec, f Features) (*ebpf.CollectionSpec, error) {
	single, err := programOf(f &^ FeatureMultiBuffer)
	if err != nil {
		return nil, err
	}
	multi, err := programOf(f | FeatureMultiBuffer)
	if err != nil {
		return nil, err
	}
	view := *parsed
	view.Programs = map[string]*ebpf.ProgramSpec{xdpDropProgXdpDrop: parsed.Programs[single], xdpDropProgXdpDropFrags: parsed.Programs[multi]}
	// The collection's BTF is not needed to load (maps and programs carry
	// their own types), and copying it cost every load and every Program.
	view.Types = nil
	spec := view.Copy()
	for _, prog := range spec.Programs {
		// One kernel name for every program: tools and other instances know it.
		prog.Name = ProgramName
	}
	return spec, nil
}

// checkClasses checks that the program counts the classes this package names.
func checkClasses(spec *ebpf.CollectionSpec) error {
	var count uint32
	if err := spec.Variables[xdpDropVarClassCount].Get(&count); err != nil {
		return fmt.Errorf("read class_count: %w", err)
	}
	if int(count) != ClassCount {
		return fmt.Errorf("embedded XDP program has %d classes, loader expects %d: run make generate", count, ClassCount)
	}
	return nil
}

// setConstants sets the program's read-only variables: the policy's
// verdicts and the compiled rules.
func setConstants(spec *ebpf.CollectionSpec, policy Policy, rules *ruleTables) error {
	slots := uint32(0)
	if policy.PerQueue {
		slots = QueueSlots
	}
	vars := []struct {
		name  string
		value any
	}{
		{xdpDropVarVerdicts, policy.verdicts()},
		{xdpDropVarDryRun, boolByte(policy.DryRun)},
		{xdpDropVarQueueSlots, slots},
		{xdpDropVarRuleCount, rules.count},
		{xdpDropVarRuleDims, rules.dims},
		{xdpDropVarRuleProto, rules.proto},
		{xdpDropVarRuleDecisions, policy.ruleDecisions()},
		{xdpDropVarRuleNoSrc, rules.noSrc},
		{xdpDropVarRuleNoDst, rules.noDst},
		{xdpDropVarRulePorts, rules.ports},
		{xdpDropVarPrefixHashShift, rules.exact.shift},
		// The key the shared maps were laid out with: every program of the
		// instance, and a variant loaded later on the same maps
		// (loadMultiBuffer), gets it from the same tables.
		{xdpDropVarPrefixHashKey, rules.exact.key},
	}
	for _, v := range vars {
		if err := spec.Variables[v.name].Set(v.value); err != nil {
			return fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	return nil
}

// sizeCounters sizes the counter maps: one block per queue slot.
func sizeCounters(spec *ebpf.CollectionSpec, policy Policy, rules *ruleTables) {
	spec.Maps[xdpDropMapCounters].MaxEntries = policy.queueSlots()
	ruleCounters := spec.Maps[xdpDropMapRuleCounters]
	// Bans count the frames they drop against their class's action there too.
	if rules.count > 0 || policy.Bans.On {
		ruleCounters.MaxEntries = policy.queueSlots()
		return
	}
	// Not used by the program without rules, and closed after load: it
	// need not be able to hold a block.
	ruleCounters.Key, ruleCounters.Value = nil, nil
	ruleCounters.ValueSize = 8
}

// sizeRuleMaps sizes the rule maps to what the compiled rules put in them.
func sizeRuleMaps(spec *ebpf.CollectionSpec, rules *ruleTables) {
	sizes := map[string]int{
		xdpDropMapPrefixBuckets: rules.buckets(),
		xdpDropMapPrefixExact:   len(rules.exact.slots),
		xdpDropMapPrefixV4:      len(rules.src.trie4) + len(rules.dst.trie4),
		xdpDropMapPrefixV6:      len(rules.src.trie6) + len(rules.dst.trie6),
		xdpDropMapPortsMap:      len(rules.srcPort) + len(rules.dstPort),
	}
	for name, n := range sizes {
		spec.Maps[name].MaxEntries = uint32(max(n, 1))
	}
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
