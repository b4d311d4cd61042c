//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// Counters holds one counter per class.
type Counters [ClassCount]Counter

// Block is what a counter block holds: every frame under its class and the
// action it got (Class[class][action]), and every frame a rule decided
// under that rule.
//
// The kernel keeps it in two maps: counters holds, per class, the frames
// that got the class's own action (every frame, without rules), and
// rule_counters, which only rules touch, the frames a rule gave the other
// action and the counters of the rules. A read puts them together.
type Block struct {
	Class [ClassCount][ActionCount]Counter
	Rule  [MaxRules]Counter
}

const counterSize = unsafe.Sizeof(Counter{})

// The kernel's blocks must be the counters they hold, back to back.
var (
	_ [unsafe.Sizeof(xdpDropCounterBlock{}) - uintptr(ClassCount)*counterSize]struct{}
	_ [uintptr(ClassCount)*counterSize - unsafe.Sizeof(xdpDropCounterBlock{})]struct{}
	_ [unsafe.Sizeof(xdpDropRuleBlock{}) - uintptr(ClassCount+MaxRules)*counterSize]struct{}
	_ [uintptr(ClassCount+MaxRules)*counterSize - unsafe.Sizeof(xdpDropRuleBlock{})]struct{}
)

// set makes b what one CPU counted: k, the counters map's block, holds
// each class c under its own action own[c]; r, the rule_counters block
// (nil without rules), the other action and the rules.
func (b *Block) set(k *xdpDropCounterBlock, r *xdpDropRuleBlock, own *[ClassCount]uint8) {
	for c := range b.Class {
		a := own[c] & 1
		b.Class[c][a] = Counter{k.Class[c].Packets, k.Class[c].Bytes}
		b.Class[c][1-a] = Counter{}
	}
	b.Rule = [MaxRules]Counter{}
	if r != nil {
		b.addRules(r, own)
	}
}

// add adds what one CPU counted to b, as set.
func (b *Block) add(k *xdpDropCounterBlock, r *xdpDropRuleBlock, own *[ClassCount]uint8) {
	for c := range b.Class {
		a := own[c] & 1
		b.Class[c][a].Packets += k.Class[c].Packets
		b.Class[c][a].Bytes += k.Class[c].Bytes
	}
	if r != nil {
		b.addRules(r, own)
	}
}

// addRules adds a rule_counters block to b: other[c] under the action that
// is not class c's own, and the rules.
func (b *Block) addRules(r *xdpDropRuleBlock, own *[ClassCount]uint8) {
	for c := range b.Class {
		a := 1 - own[c]&1
		b.Class[c][a].Packets += r.Other[c].Packets
		b.Class[c][a].Bytes += r.Other[c].Bytes
	}
	for i := range b.Rule {
		b.Rule[i].Packets += r.Rule[i].Packets
		b.Rule[i].Bytes += r.Rule[i].Bytes
	}
}

// empty reports whether no frame was counted in b.
func (b *Block) empty() bool {
	for c := range b.Class {
		for a := range b.Class[c] {
			if b.Class[c][a].Packets != 0 {
				return false
			}
		}
	}
	return true
}

// Totals sums the class counters over actions into dst.
func (b *Block) Totals(dst *Counters) {
	for c := range dst {
		dst[c] = Counter{}
		for a := range b.Class[c] {
			dst[c].Packets += b.Class[c][a].Packets
			dst[c].Bytes += b.Class[c][a].Bytes
		}
	}
}

// ErrPermission is returned when the process may not load or attach BPF programs.
// CAP_PERFMON is among them because the verifier allows the program's
// variable-offset packet reads (IPv4 options, IPv6 extension headers) only
// to "root", which it takes to mean CAP_PERFMON.
var ErrPermission = errors.New("operation not permitted: needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (or root)")

// ErrNativeUnsupported is returned when the driver has no native XDP support.
var ErrNativeUnsupported = errors.New("driver does not support native XDP")

// ErrInterfaceGone is returned when the attached interface has been removed.
var ErrInterfaceGone = errors.New("interface was removed")

// ExistingProgramError is returned when the interface already runs an XDP
// program that this Program did not attach.
type ExistingProgramError struct {
	ID   ebpf.ProgramID
	Name string
	// Uninspectable: this process may not open the program to read its
	// name (that needs CAP_SYS_ADMIN), so whose it is cannot be told.
	Uninspectable bool
}

func (e *ExistingProgramError) Error() string {
	if e.Uninspectable {
		return fmt.Sprintf("interface already has XDP program id %d, which this process may not inspect (needs CAP_SYS_ADMIN)", e.ID)
	}
	if e.Name == "" {
		return fmt.Sprintf("interface already has XDP program id %d", e.ID)
	}
	return fmt.Sprintf("interface already has XDP program id %d (%s)", e.ID, e.Name)
}

// ProgramName is the kernel name of the XDP program, as bpftool shows it.
const ProgramName = "xdp_drop"

// Program is one loaded copy of the XDP program with its own counters,
// attached to at most one interface. It starts as the single-buffer program
// and becomes the multi-buffer one where a device needs it (see Attach).
type Program struct {
	objs        objects
	policy      Policy // loads the other variant with rules (see loadMultiBuffer)
	multiBuffer bool   // objs.Prog is the multi-buffer (xdp.frags) variant
	noMulti     bool   // never switch to the multi-buffer variant
	nativeErr   error  // why native mode was refused, when auto fell back
	link        link.Link
	mode        Mode
	id          ebpf.ProgramID
	perCPU      []xdpDropCounterBlock // one slot of counters, read by lookup
	perCPURules []xdpDropRuleBlock    // one slot of rule_counters; nil without rules
	slots       uint32                // counter blocks: 1, or QueueSlots with per-queue counting
	sums        []Block               // per-CPU sums over queues, reused between reads
	// own is, per class, the action (bit 0) of the frames the counters map
	// counts: the class's own, as the verdict table gives it.
	own   [ClassCount]uint8
	rules *ruleTables
	// fingerprint names the program build and policy the counters count under.
	fingerprint string
	// observed is the ifindex of another process's program opened
	// read-only by Observe, 0 for a program of this process.
	observed int
}

// objects is what one load of the program gives: one variant of the program,
// the counters it updates and the maps of its rules (rule_counters among them).
type objects struct {
	Prog          *ebpf.Program
	Counters      *ebpf.Map
	RuleCounters  *ebpf.Map
	PrefixBuckets *ebpf.Map
	PrefixExact   *ebpf.Map
	PrefixV4      *ebpf.Map
	PrefixV6      *ebpf.Map
	Ports         *ebpf.Map
	// Sampling (sample.go): nil in a program that does not sample.
	SampleStates  *ebpf.Map
	SampleBuckets *ebpf.Map
	Samples       *ebpf.Map
}

func (o *objects) Close() error {
	err := o.Prog.Close()
	for _, m := range o.maps() {
		err = errors.Join(err, m.Close())
	}
	return err
}

// maps are the maps of the program by their names in the ELF.
// Maps the program does not use are closed after load (see dropUnused) and
// left out.
func (o *objects) maps() map[string]*ebpf.Map {
	all := map[string]*ebpf.Map{
		xdpDropMapCounters:      o.Counters,
		xdpDropMapRuleCounters:  o.RuleCounters,
		xdpDropMapPrefixBuckets: o.PrefixBuckets,
		xdpDropMapPrefixExact:   o.PrefixExact,
		xdpDropMapPrefixV4:      o.PrefixV4,
		xdpDropMapPrefixV6:      o.PrefixV6,
		xdpDropMapPortsMap:      o.Ports,
		xdpDropMapSampleStates:  o.SampleStates,
		xdpDropMapSampleBuckets: o.SampleBuckets,
		xdpDropMapSamples:       o.Samples,
	}
	for name, m := range all {
		if m == nil {
			delete(all, name)
		}
	}
	return all
}

// missesRuleMaps reports whether a rule map of a dimension in dims is absent.
func (o *objects) missesRuleMaps(dims uint8) bool {
	prefixes := dims&uint8(xdpDropRuleDimsRULE_DIM_SRC|xdpDropRuleDimsRULE_DIM_DST) != 0
	ports := dims&uint8(xdpDropRuleDimsRULE_DIM_PORTS) != 0
	return prefixes && slices.Contains([]*ebpf.Map{o.PrefixBuckets, o.PrefixExact, o.PrefixV4, o.PrefixV6}, nil) ||
		ports && o.Ports == nil
}

// dropUnused closes the rule maps of dimensions no rule uses, and
// rule_counters without rules: the program holds its own references, and an
// interface then costs no descriptor for them (FDsPerInterface without rules).
func (o *objects) dropUnused(count uint32, dims uint8, sample bool) {
	var unused []**ebpf.Map
	if !sample {
		unused = append(unused, &o.SampleStates, &o.SampleBuckets, &o.Samples)
	}
	if count == 0 {
		unused = append(unused, &o.RuleCounters)
	}
	if dims&uint8(xdpDropRuleDimsRULE_DIM_SRC|xdpDropRuleDimsRULE_DIM_DST) == 0 {
		unused = append(unused, &o.PrefixBuckets, &o.PrefixExact, &o.PrefixV4, &o.PrefixV6)
	}
	if dims&uint8(xdpDropRuleDimsRULE_DIM_PORTS) == 0 {
		unused = append(unused, &o.Ports)
	}
	for _, m := range unused {
		(*m).Close()
		*m = nil
	}
}

// programObjects are what a load assigns: the variant loadVariant puts
// under the name xdp_drop, and the maps; cilium/ebpf loads only what is
// assigned.
type programObjects struct {
	Prog          *ebpf.Program `ebpf:"xdp_drop"`
	Counters      *ebpf.Map     `ebpf:"counters"`
	RuleCounters  *ebpf.Map     `ebpf:"rule_counters"`
	PrefixBuckets *ebpf.Map     `ebpf:"prefix_buckets"`
	PrefixExact   *ebpf.Map     `ebpf:"prefix_exact"`
	PrefixV4      *ebpf.Map     `ebpf:"prefix_v4"`
	PrefixV6      *ebpf.Map     `ebpf:"prefix_v6"`
	Ports         *ebpf.Map     `ebpf:"ports_map"`
	SampleStates  *ebpf.Map     `ebpf:"sample_states"`
	SampleBuckets *ebpf.Map     `ebpf:"sample_buckets"`
	Samples       *ebpf.Map     `ebpf:"samples"`
}

// Load loads the program with the given policy. The caller must Close it.
func Load(policy Policy) (*Program, error) {
	spec, rules, err := configuredSpec(policy)
	if err != nil {
		return nil, err
	}
	return load(spec, policy, rules, nil)
}

// embeddedSpec parses the embedded ELF once; every load works on a copy.
var embeddedSpec = sync.OnceValues(loadXdpDrop)

// configuredSpec returns a copy of the program's spec set up for policy:
// the verdict table, the queue slots and the counter map's size, the rules'
// constants and map sizes; the rule maps' contents are filled after load.
func configuredSpec(policy Policy) (*ebpf.CollectionSpec, *ruleTables, error) {
	parsed, err := embeddedSpec()
	if err != nil {
		return nil, nil, fmt.Errorf("read embedded XDP program: %w", err)
	}
	rules, err := compileRules(policy.Rules)
	if err != nil {
		return nil, nil, err
	}
	spec, err := specFor(parsed, policy, rules)
	if err != nil {
		return nil, nil, err
	}
	return spec, rules, nil
}

// specFor returns a copy of parsed set up for policy and its compiled
// rules (see configuredSpec).
func specFor(parsed *ebpf.CollectionSpec, policy Policy, rules *ruleTables) (*ebpf.CollectionSpec, error) {
	// The copy holds the two programs of the policy's kind, single- and
	// multi-buffer, under the names of the programs without rules and with
	// the one kernel name; the programs it cannot need are not copied.
	// The programs with rules are compiled apart, so that those without
	// them keep every register for the frame's path; likewise sampling.
	single, multi := variants(len(policy.Rules) > 0, policy.Sample.On())
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
	var count uint32
	if err := spec.Variables[xdpDropVarClassCount].Get(&count); err != nil {
		return nil, fmt.Errorf("read class_count: %w", err)
	}
	if int(count) != ClassCount {
		return nil, fmt.Errorf("embedded XDP program has %d classes, loader expects %d: run make generate", count, ClassCount)
	}
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
		// The key the maps were laid out with: a variant loaded later on
		// the same maps (loadMultiBuffer) gets it from the same tables.
		{xdpDropVarPrefixHashKey, rules.exact.key},
	}
	for _, v := range vars {
		if err := spec.Variables[v.name].Set(v.value); err != nil {
			return nil, fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	spec.Maps[xdpDropMapCounters].MaxEntries = policy.queueSlots()
	ruleCounters := spec.Maps[xdpDropMapRuleCounters]
	if rules.count > 0 {
		ruleCounters.MaxEntries = policy.queueSlots()
	} else {
		// Not used by the program without rules, and closed after
		// load: it need not be able to hold a block.
		ruleCounters.Key, ruleCounters.Value = nil, nil
		ruleCounters.ValueSize = 8
	}
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
	if err := setSampling(spec, policy.Sample); err != nil {
		return nil, err
	}
	return spec, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// fillRules writes the rules' prefixes and port masks into the maps.
func (o *objects) fillRules(t *ruleTables) error {
	for dir, d := range []*prefixTables{&t.src, &t.dst} {
		if len(d.buckets) == 0 {
			continue
		}
		if err := fillPrefixes(o, d, dir); err != nil {
			return err
		}
	}
	if len(t.exact.slots) > 0 {
		// The array starts zeroed: empty slots need no write.
		var keys []uint32
		var slots []xdpDropPrefixSlot
		for i, s := range t.exact.slots {
			if s.Len != 0 {
				keys = append(keys, uint32(i))
				slots = append(slots, s)
			}
		}
		if _, err := o.PrefixExact.BatchUpdate(keys, slots, nil); err != nil {
			return fmt.Errorf("write prefixes: %w", err)
		}
	}
	if t.srcPort == nil {
		return nil
	}
	masks := append(slices.Clone(t.srcPort), t.dstPort...)
	keys := make([]uint32, len(masks))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := o.Ports.BatchUpdate(keys, masks, nil); err != nil {
		return fmt.Errorf("write port rules: %w", err)
	}
	return nil
}

// fillPrefixes writes one direction's prefix tables (dir 0: source, 1:
// destination) into the maps.
func fillPrefixes(o *objects, t *prefixTables, dir int) error {
	keys := make([]uint32, len(t.buckets))
	for i := range keys {
		keys[i] = uint32(dir*len(t.buckets) + i)
	}
	if _, err := o.PrefixBuckets.BatchUpdate(keys, t.buckets, nil); err != nil {
		return fmt.Errorf("write prefix buckets: %w", err)
	}
	if len(t.trie4) > 0 {
		keys := make([]xdpDropLpmV4Key, 0, len(t.trie4))
		values := make([]uint64, 0, len(t.trie4))
		for p, mask := range t.trie4 {
			keys = append(keys, xdpDropLpmV4Key{Prefixlen: 8 + uint32(p.Bits()), Dir: uint8(dir), Addr: p.Addr().As4()})
			values = append(values, mask)
		}
		if err := batchUpdate(o.PrefixV4, keys, values); err != nil {
			return fmt.Errorf("write prefix rules: %w", err)
		}
	}
	if len(t.trie6) > 0 {
		keys := make([]xdpDropLpmV6Key, 0, len(t.trie6))
		values := make([]uint64, 0, len(t.trie6))
		for p, mask := range t.trie6 {
			keys = append(keys, xdpDropLpmV6Key{Prefixlen: 8 + uint32(p.Bits()), Dir: uint8(dir), Addr: p.Addr().As16()})
			values = append(values, mask)
		}
		if err := batchUpdate(o.PrefixV6, keys, values); err != nil {
			return fmt.Errorf("write prefix rules: %w", err)
		}
	}
	return nil
}

// batchUpdate writes keys and values in one call where the kernel can,
// one by one otherwise.
func batchUpdate[K any](m *ebpf.Map, keys []K, values []uint64) error {
	_, err := m.BatchUpdate(keys, values, nil)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Update(&keys[i], values[i], ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return nil
}

// memlock raises RLIMIT_MEMLOCK once, and only on kernels that charge BPF
// memory to it (before 5.11); later kernels charge the memory cgroup.
var memlock = sync.OnceValue(rlimit.RemoveMemlock)

func load(spec *ebpf.CollectionSpec, policy Policy, rules *ruleTables, opts *ebpf.CollectionOptions) (*Program, error) {
	if err := memlock(); err != nil {
		if errors.Is(err, unix.EPERM) {
			// Without CAP_BPF the probe for memcg accounting fails too.
			return nil, fmt.Errorf("load XDP program: %w", ErrPermission)
		}
		return nil, fmt.Errorf("raise RLIMIT_MEMLOCK for BPF maps (kernel before 5.11): %w", err)
	}
	p, err := newProgram(policy, rules)
	if err != nil {
		return nil, err
	}
	objs, err := loadVariant(spec, false, opts)
	if err != nil {
		return nil, err
	}
	p.objs = objs
	if err := objs.fillRules(rules); err != nil {
		p.objs.Close()
		return nil, err
	}
	p.objs.dropUnused(rules.count, rules.dims, policy.Sample.On())
	if p.id, err = programID(objs.Prog); err != nil {
		p.objs.Close()
		return nil, err
	}
	return p, nil
}

// newProgram makes a Program for policy and its rules, without objects.
func newProgram(policy Policy, rules *ruleTables) (*Program, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	p := &Program{
		slots: policy.queueSlots(), policy: policy, rules: rules, fingerprint: policy.fingerprint(),
		perCPU: make([]xdpDropCounterBlock, cpus),
	}
	if rules.count > 0 {
		p.perCPURules = make([]xdpDropRuleBlock, cpus)
	}
	for c, v := range policy.verdicts() {
		p.own[c] = v & 1
	}
	return p, nil
}

// loadVariant loads the single-buffer or the multi-buffer program of spec.
func loadVariant(spec *ebpf.CollectionSpec, multiBuffer bool, opts *ebpf.CollectionOptions) (objects, error) {
	if multiBuffer {
		// A view of spec with the multi-buffer program under the name
		// programObjects assigns; loading leaves the specs as they are.
		view := *spec
		view.Programs = map[string]*ebpf.ProgramSpec{xdpDropProgXdpDrop: spec.Programs[xdpDropProgXdpDropFrags]}
		spec = &view
	}
	var o programObjects
	err := spec.LoadAndAssign(&o, opts)
	objs := objects(o)
	if err == nil {
		return objs, nil
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && strings.Contains(fmt.Sprintf("%+v", ve), "prohibited for !root") {
		return objs, fmt.Errorf("load XDP program: %w", ErrPermission)
	}
	if errors.Is(err, unix.EPERM) {
		return objs, fmt.Errorf("load XDP program: %w", ErrPermission)
	}
	if fdErr := errOutOfFDs(); fdErr != nil {
		// Not the verifier's or the kernel's doing, whatever err says.
		return objs, fmt.Errorf("load XDP program: %w", fdErr)
	}
	if errors.Is(err, unix.EMFILE) {
		return objs, fmt.Errorf("load XDP program: %w", err)
	}
	if ve != nil {
		return objs, fmt.Errorf("load XDP program: %w", verifierLog{ve})
	}
	return objs, fmt.Errorf("load XDP program: %w", err)
}

// verifierLog is the verifier's refusal with its whole log in the text,
// still a *ebpf.VerifierError to errors.As. A named field, not embedded: an
// embedded one would lend its Format, which prints the log cut short.
type verifierLog struct{ err *ebpf.VerifierError }

func (e verifierLog) Error() string { return fmt.Sprintf("%+v", e.err) }
func (e verifierLog) Unwrap() error { return e.err }

func programID(prog *ebpf.Program) (ebpf.ProgramID, error) {
	info, err := prog.Info()
	if err != nil {
		return 0, fmt.Errorf("read XDP program info: %w", err)
	}
	id, _ := info.ID()
	return id, nil
}

// ErrNoMultiBuffer is returned when the kernel cannot load multi-buffer XDP
// programs (before Linux 5.18).
var ErrNoMultiBuffer = errors.New("this kernel has no multi-buffer XDP (needs Linux 5.18, veth 5.19)")

// haveMultiBuffer probes once whether the kernel loads multi-buffer XDP
// programs: the helper that reads a whole frame's length came with them.
var haveMultiBuffer = sync.OnceValue(func() error {
	err := features.HaveProgramHelper(ebpf.XDP, asm.FnXdpGetBuffLen)
	if errors.Is(err, ebpf.ErrNotSupported) {
		return ErrNoMultiBuffer
	}
	return err
})

// UseMultiBuffer replaces the program, before it is attached, with its
// multi-buffer variant, which keeps the counters. Attach does this itself
// where a device needs it.
func (p *Program) UseMultiBuffer() error {
	if p.link != nil {
		return errors.New("program is already attached")
	}
	alt, err := p.loadMultiBuffer()
	if err != nil {
		return err
	}
	p.adopt(alt)
	return nil
}

// DisableMultiBuffer keeps Attach from switching to the multi-buffer
// variant, as on a kernel without it.
func (p *Program) DisableMultiBuffer() { p.noMulti = true }

// MultiBuffer reports whether the program is the multi-buffer variant.
func (p *Program) MultiBuffer() bool { return p.multiBuffer }

// loadMultiBuffer loads the multi-buffer variant on the same counters.
func (p *Program) loadMultiBuffer() (*ebpf.Program, error) {
	if p.noMulti {
		return nil, ErrNoMultiBuffer
	}
	if err := haveMultiBuffer(); err != nil {
		return nil, err
	}
	// The spec is made again rather than kept: it is needed only here, and
	// a Program per interface kept it for nothing otherwise.
	parsed, err := embeddedSpec()
	if err != nil {
		return nil, fmt.Errorf("read embedded XDP program: %w", err)
	}
	spec, err := specFor(parsed, p.policy, p.rules)
	if err != nil {
		return nil, err
	}
	opts := &ebpf.CollectionOptions{MapReplacements: p.objs.maps()}
	objs, err := loadVariant(spec, true, opts)
	if err != nil {
		return nil, err
	}
	if p.rules != nil && p.objs.missesRuleMaps(p.rules.dims) {
		// An adopted program: its rule maps were not handed over.
		if err := objs.fillRules(p.rules); err != nil {
			objs.Close()
			return nil, err
		}
	}
	// Clones of p's maps, or unused ones: the program holds its own references.
	for _, m := range objs.maps() {
		m.Close()
	}
	return objs.Prog, nil
}

// adopt makes the multi-buffer program alt the program of p.
func (p *Program) adopt(alt *ebpf.Program) {
	id, err := programID(alt)
	if err != nil {
		id = 0
	}
	p.objs.Prog.Close()
	p.objs.Prog = alt
	p.id = id
	p.multiBuffer = true
}

// ID is the kernel's id of the loaded program, as ip link and bpftool show it.
func (p *Program) ID() ebpf.ProgramID { return p.id }

// Mode is the mode the program is attached in, or "" when it is not attached.
func (p *Program) Mode() Mode { return p.mode }

// XDP returns the program itself, for BPF_PROG_TEST_RUN.
func (p *Program) XDP() *ebpf.Program { return p.objs.Prog }

// NativeError is why native mode was refused when ModeAuto fell back to
// generic mode, nil otherwise.
func (p *Program) NativeError() error { return p.nativeErr }

// Attach attaches the program to the interface with index ifindex.
//
// In native mode the single-buffer program is tried first; when the driver
// refuses it (an MTU that needs more than one buffer per frame), the
// multi-buffer variant is tried, and kept if the driver takes it. With
// ModeAuto every native refusal falls back to generic mode, and
// NativeError tells why; Mode tells which mode took.
func (p *Program) Attach(ifindex int, mode Mode) error {
	if p.link != nil {
		return errors.New("program is already attached")
	}
	p.nativeErr = nil
	switch mode {
	case ModeAuto:
		err := p.attachNative(ifindex)
		if err == nil || !nativeRefusal(err) {
			return err
		}
		if gerr := p.attach(ifindex, ModeGeneric); gerr != nil {
			return fmt.Errorf("%w; generic mode failed too: %w", err, gerr)
		}
		p.nativeErr = err
		return nil
	case ModeNative:
		return p.attachNative(ifindex)
	}
	return p.attach(ifindex, mode)
}

// nativeRefusal reports whether err is the driver refusing native XDP,
// where generic mode may still work: not a missing privilege, not a program
// already in the way.
func nativeRefusal(err error) bool {
	var existing *ExistingProgramError
	return !errors.Is(err, ErrPermission) && !errors.As(err, &existing)
}

// attachNative attaches in native mode, with the multi-buffer variant where
// the single-buffer program is refused and the multi-buffer one is not.
func (p *Program) attachNative(ifindex int) error {
	err := p.attach(ifindex, ModeNative)
	if err == nil || p.multiBuffer || !nativeRefusal(err) {
		return err
	}
	alt, mbErr := p.loadMultiBuffer()
	if mbErr != nil {
		return nativeError(ifindex, err, mbErr)
	}
	flags, _ := modeFlags(ModeNative)
	l, altErr := link.AttachXDP(link.XDPOptions{Program: alt, Interface: ifindex, Flags: flags})
	if altErr != nil {
		alt.Close()
		return nativeError(ifindex, err, fmt.Errorf("the multi-buffer program was refused too: %w", altErr))
	}
	p.adopt(alt)
	p.link, p.mode = l, ModeNative
	return nil
}

func (p *Program) attach(ifindex int, mode Mode) error {
	flags, ok := modeFlags(mode)
	if !ok {
		return fmt.Errorf("unknown XDP mode %q", mode)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.Prog, Interface: ifindex, Flags: flags})
	if err != nil {
		return attachError(ifindex, mode, err)
	}
	p.link = l
	p.mode = mode
	return nil
}

func attachError(ifindex int, mode Mode, err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return ErrPermission
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		if existing := existingProgram(ifindex); existing != nil {
			return existing
		}
	case errors.Is(err, unix.EOPNOTSUPP) && mode == ModeNative:
		return ErrNativeUnsupported
	}
	return fmt.Errorf("attach XDP in %s mode: %w", mode, err)
}

// Attached reports whether the attachment still holds; it returns
// ErrInterfaceGone when the kernel detached it because the interface went away.
func (p *Program) Attached() error {
	if p.observed != 0 {
		return p.stillAttached()
	}
	if p.link == nil {
		return errors.New("not attached")
	}
	info, err := p.link.Info()
	if err != nil {
		return fmt.Errorf("read link info: %w", err)
	}
	if xdp := info.XDP(); xdp == nil || xdp.Ifindex == 0 {
		return ErrInterfaceGone
	}
	return nil
}

// Detach removes the program from its interface; the counters stay readable.
func (p *Program) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	p.mode = ""
	if err != nil {
		return fmt.Errorf("detach XDP link: %w", err)
	}
	return nil
}

// Close detaches the program and releases it and its counters.
func (p *Program) Close() error {
	err := p.Detach()
	return errors.Join(err, p.objs.Close())
}

// BlockFunc receives one block of counters that has seen traffic: queue is
// its RX queue (QueueSlots-1 holds every queue past the others) or -1 when
// summed over queues, cpu its CPU or -1 when summed over CPUs. c is reused
// by the next call.
type BlockFunc func(queue, cpu int, b *Block)

// ReadSum sums the counters over CPUs and queues into dst and calls f with
// them unless they are all empty.
func (p *Program) ReadSum(dst *Block, f BlockFunc) error {
	err := p.eachSlot(func(q int) {
		for cpu := range p.perCPU {
			if q == 0 && cpu == 0 {
				dst.set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			} else {
				dst.add(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			}
		}
	})
	if err != nil {
		return err
	}
	emit(dst, -1, -1, f)
	return nil
}

// ReadPerQueue calls f for every RX queue with traffic, summed over CPUs.
// A program loaded without PerQueue has one block: it is read as ReadSum.
func (p *Program) ReadPerQueue(dst *Block, f BlockFunc) error {
	if p.slots == 1 {
		return p.ReadSum(dst, f)
	}
	return p.eachSlot(func(q int) {
		for cpu := range p.perCPU {
			if cpu == 0 {
				dst.set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			} else {
				dst.add(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			}
		}
		emit(dst, q, -1, f)
	})
}

// ReadPerCPU calls f for every CPU with traffic, summed over queues.
func (p *Program) ReadPerCPU(f BlockFunc) error {
	if len(p.sums) != len(p.perCPU) {
		p.sums = make([]Block, len(p.perCPU))
	}
	sums := p.sums
	err := p.eachSlot(func(q int) {
		for cpu := range sums {
			if q == 0 {
				sums[cpu].set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			} else {
				sums[cpu].add(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			}
		}
	})
	if err != nil {
		return err
	}
	for cpu := range sums {
		emit(&sums[cpu], -1, cpu, f)
	}
	return nil
}

// ReadPerQueueCPU calls f for every RX queue and CPU with traffic. A
// program loaded without PerQueue has one block: it is read as ReadPerCPU.
func (p *Program) ReadPerQueueCPU(dst *Block, f BlockFunc) error {
	if p.slots == 1 {
		return p.ReadPerCPU(f)
	}
	return p.eachSlot(func(q int) {
		for cpu := range p.perCPU {
			dst.set(&p.perCPU[cpu], p.ruleBlock(cpu), &p.own)
			emit(dst, q, cpu, f)
		}
	})
}

// ruleBlock is the rule_counters block eachSlot read for cpu, nil without rules.
func (p *Program) ruleBlock(cpu int) *xdpDropRuleBlock {
	if p.perCPURules == nil {
		return nil
	}
	return &p.perCPURules[cpu]
}

// eachSlot reads the counter blocks of every queue slot, one per CPU, into
// p.perCPU, and those of rule_counters into p.perCPURules when the program
// has rules, and calls f; they are overwritten by the next slot's.
func (p *Program) eachSlot(f func(slot int)) error {
	for q := uint32(0); q < p.slots; q++ {
		if err := lookup(p.objs.Counters, q, unsafe.Pointer(&p.perCPU[0])); err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		runtime.KeepAlive(p.perCPU)
		if p.perCPURules != nil {
			if err := lookup(p.objs.RuleCounters, q, unsafe.Pointer(&p.perCPURules[0])); err != nil {
				return fmt.Errorf("read rule counters: %w", err)
			}
			runtime.KeepAlive(p.perCPURules)
		}
		f(int(q))
	}
	return nil
}

// mapLookupAttr is the BPF_MAP_LOOKUP_ELEM part of union bpf_attr.
type mapLookupAttr struct {
	mapFd uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

// lookup reads the blocks of key q of the per-CPU array m, one per CPU, into
// value with one BPF_MAP_LOOKUP_ELEM: the kernel writes them back to back
// (their size is a multiple of 8), which is the layout of a slice of them;
// the caller keeps that slice alive. cilium/ebpf's per-CPU Lookup would
// allocate a buffer as large and unmarshal it through reflection at every
// call, most of the cost of a gather.
func lookup(m *ebpf.Map, q uint32, value unsafe.Pointer) error {
	attr := mapLookupAttr{
		mapFd: uint32(m.FD()),
		key:   unsafe.Pointer(&q),
		value: value,
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return errno
	}
	return nil
}

// emit calls f for a block that has seen traffic.
func emit(b *Block, queue, cpu int, f BlockFunc) {
	if !b.empty() {
		f(queue, cpu, b)
	}
}

// ReadBlock sums the counters over CPUs and queues into dst.
func (p *Program) ReadBlock(dst *Block) error {
	return p.ReadSum(dst, func(int, int, *Block) {})
}

// ReadCounters sums the class counters over CPUs, queues and actions into dst.
func (p *Program) ReadCounters(dst *Counters) error {
	var b Block
	if err := p.ReadBlock(&b); err != nil {
		return err
	}
	b.Totals(dst)
	return nil
}

// PrefixNote says, when there is something to say, how many exact prefixes
// the hash table could not hold within its ceiling and left to the trie:
// their frames are decided the same, at the trie's speed. Only a rule set
// built against the table's secret key, or rare bad luck, does that.
func (p *Program) PrefixNote() string {
	if p.rules == nil || p.rules.exact.overflowPrefixes == 0 {
		return ""
	}
	e := &p.rules.exact
	return fmt.Sprintf("%d exact prefixes (in %d buckets) did not fit the exact-prefix hash table within its ceiling of %d slots per prefix "+
		"and are looked up in the trie instead: decided the same, more slowly (bad luck, or a list built against this load's secret hash key; the next load draws another)", e.overflowPrefixes, e.overflowBuckets, exactRoom<<(maxExactGrowth+1))
}

// RuleMemory is the kernel memory the program's rule maps (rule_counters
// among them) take, as the kernel accounts it (memlock), 0 without rules.
func (p *Program) RuleMemory() (uint64, error) {
	var total uint64
	for name, m := range p.objs.maps() {
		if name == xdpDropMapCounters {
			continue
		}
		info, err := m.Info()
		if err != nil {
			return 0, fmt.Errorf("read map %s info: %w", name, err)
		}
		n, _ := info.Memlock()
		total += n
	}
	return total, nil
}
