//go:build linux

package bpf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
)

// FlowTable is an instance's FlowSpec rules, in maps shared by every
// program of the instance (Instance.FlowSpec), continued across a prefix
// file swap and handed over with the ban maps.
//
// In the kernel (flowspec.h) each family's rules are classified by bit
// vectors: a frame's value in each dimension some rule uses is looked up
// to a class whose bitmap holds the rules that value satisfies, and the
// bitmaps are ANDed; the bits left are the matching rules, in order. The
// per-frame cost does not grow with the number of rules, but for the words
// of a bitmap (one per 64 rules). Every table is there twice: Set writes
// the generation not in force, flips the control word, and waits for a
// grace period before the old one may be written again, so a frame is
// decided wholly by the old set or wholly by the new one.
//
// Each rule ID keeps a slot for its counters (per interface) and its
// limit's GCRA cell (shared) while it stays in the set, whatever its
// position; a slot freed is zeroed before it is used again.
//
// A FlowTable is safe for concurrent use.
type FlowTable struct {
	in *Instance
}

// FlowCount is one rule's frames on one interface, summed over CPUs: those
// it matched, and of them those it dropped (would_drop in a dry run).
type FlowCount struct {
	Packets, Bytes, DroppedPackets, DroppedBytes uint64
}

// flowMaps are the FlowSpec maps an instance's programs share.
type flowMaps struct {
	Ctl, Tables, Rows, Rules, Pfx4, Pfx6, Cells, Scratch *ebpf.Map
	// saved holds the set in force (JSON, by slot and chunk), read by a
	// successor that adopts the maps; no program reads it.
	saved *ebpf.Map
}

// flowMapCount is how many maps flowMaps holds, handed over in ordered's order.
const flowMapCount = 9

func (m *flowMaps) ordered() []*ebpf.Map {
	return []*ebpf.Map{m.Ctl, m.Tables, m.Rows, m.Rules, m.Pfx4, m.Pfx6, m.Cells, m.Scratch, m.saved}
}

// byName are the maps programs use, by their names in the ELF.
func (m *flowMaps) byName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		xdpDropMapFlowspecCtl: m.Ctl, xdpDropMapFlowspecTables: m.Tables, xdpDropMapFlowspecRows: m.Rows,
		xdpDropMapFlowspecRules: m.Rules, xdpDropMapFlowspecPfx4: m.Pfx4, xdpDropMapFlowspecPfx6: m.Pfx6,
		xdpDropMapFlowspecCells: m.Cells, xdpDropMapFlowspecScratch: m.Scratch,
	}
}

func (m *flowMaps) Close() error {
	var err error
	for _, mm := range m.ordered() {
		if mm != nil {
			err = errors.Join(err, mm.Close())
		}
	}
	return err
}

// flowSavedChunk is the bytes of one entry of the saved set.
const flowSavedChunk = 1024

// flowSavedChunks is the most chunks a rule's record takes.
const flowSavedChunks = 16

// flowSavedSpec is the map of the saved set, for a layout.
func flowSavedSpec(lay flowLayout) *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name:       "flowspec_saved",
		Type:       ebpf.Hash,
		KeySize:    4,
		ValueSize:  flowSavedChunk,
		MaxEntries: uint32(lay.slots() * 4),
		Flags:      uint32(1), // BPF_F_NO_PREALLOC: memory for the records there only
	}
}

// slots is how many counter slots a layout has: room for a whole new set
// of both families while the old one's are still being let go.
func (l flowLayout) slots() int { return 4 * l.max }

// flowState is the FlowSpec state of a ban table's maps.
type flowState struct {
	mu    sync.Mutex
	maps  *flowMaps
	lay   flowLayout
	gen   uint32 // the generation in force
	rules []FlowRule
	slots map[string]uint32
	free  []uint32 // zeroed, unused slots
	// written are the prefix entries of each generation, to delete before it is written again.
	written [2][2][]flowPrefixEntry // by generation, family
	// grace is a map of maps whose update waits for an RCU grace period.
	grace, inner *ebpf.Map
	// counters are the per-interface counters of the programs on the maps: a freed slot is zeroed in each.
	counters map[*ebpf.Map]bool
}

// max is the rules a family the config allows.
func (c FlowSpecConfig) max() int {
	if c.MaxRules <= 0 {
		return FlowMaxRules
	}
	return c.MaxRules
}

func (c FlowSpecConfig) check() error {
	if c.MaxRules < 0 || c.MaxRules > FlowMaxRules {
		return fmt.Errorf("flowspec max_rules %d is out of range: give 1 to %d, or 0 for %d", c.MaxRules, FlowMaxRules, FlowMaxRules)
	}
	return nil
}

// FlowSpec is the instance's FlowSpec table, nil when the policy has none
// (Policy.FlowSpec.On). Its maps are loaded with the ban maps.
func (in *Instance) FlowSpec() *FlowTable {
	if !in.policy.FlowSpec.On {
		return nil
	}
	return &FlowTable{in: in}
}

// state is the table's state, loading the maps the first time.
func (t *FlowTable) state() (*flowState, error) {
	b, err := t.in.Bans()
	if err != nil {
		return nil, err
	}
	if b.flow == nil {
		return nil, errors.New("the instance's ban maps carry no FlowSpec tables")
	}
	return b.flow, nil
}

// newFlowState loads the FlowSpec maps of spec for the layout.
func newFlowState(spec *ebpf.CollectionSpec, lay flowLayout) (*flowState, error) {
	var lm struct {
		Ctl     *ebpf.Map `ebpf:"flowspec_ctl"`
		Tables  *ebpf.Map `ebpf:"flowspec_tables"`
		Rows    *ebpf.Map `ebpf:"flowspec_rows"`
		Rules   *ebpf.Map `ebpf:"flowspec_rules"`
		Pfx4    *ebpf.Map `ebpf:"flowspec_pfx4"`
		Pfx6    *ebpf.Map `ebpf:"flowspec_pfx6"`
		Cells   *ebpf.Map `ebpf:"flowspec_cells"`
		Scratch *ebpf.Map `ebpf:"flowspec_scratch"`
	}
	if err := spec.LoadAndAssign(&lm, nil); err != nil {
		return nil, loadError(err)
	}
	m := &flowMaps{Ctl: lm.Ctl, Tables: lm.Tables, Rows: lm.Rows, Rules: lm.Rules, Pfx4: lm.Pfx4, Pfx6: lm.Pfx6, Cells: lm.Cells, Scratch: lm.Scratch}
	saved, err := ebpf.NewMap(flowSavedSpec(lay))
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("create the FlowSpec handover map: %w", err)
	}
	m.saved = saved
	s, err := flowStateOf(m, lay)
	if err != nil {
		m.Close()
		return nil, err
	}
	for i := range lay.slots() {
		s.free = append(s.free, uint32(lay.slots()-1-i))
	}
	return s, nil
}

// flowStateOf makes the state of maps m, with nothing in force.
func flowStateOf(m *flowMaps, lay flowLayout) (*flowState, error) {
	s := &flowState{maps: m, lay: lay, slots: map[string]uint32{}, counters: map[*ebpf.Map]bool{}}
	var err error
	s.inner, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err == nil {
		s.grace, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1,
			InnerMap: &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}})
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("create the FlowSpec grace map: %w", err)
	}
	return s, nil
}

func (s *flowState) close() error {
	var err error
	for _, m := range []*ebpf.Map{s.grace, s.inner} {
		if m != nil {
			err = errors.Join(err, m.Close())
		}
	}
	return errors.Join(err, s.maps.Close())
}

// waitGrace returns once every program run that began before it has
// ended: the kernel waits for an RCU grace period at an update of a map
// of maps.
func (s *flowState) waitGrace() error {
	if err := s.grace.Update(uint32(0), s.inner, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("wait for the FlowSpec grace period: %w", err)
	}
	return nil
}

// Set puts rules, the whole set of both families in enforcement order, in
// force: every frame is decided by the old set or by the new one, never by
// a mix, and when Set returns every frame is decided by the new one. It
// refuses the set whole (the old one stays) when a family has more rules
// than its max, a rule FlowExpressible refuses, or an ID twice.
func (t *FlowTable) Set(rules []FlowRule) error {
	s, err := t.state()
	if err != nil {
		return err
	}
	return s.set(rules)
}

func (s *flowState) set(rules []FlowRule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fams, err := flowSplit(rules, s.lay.max)
	if err != nil {
		return err
	}
	// Slots: kept by ID, new ones from the free list.
	slots := make(map[string]uint32, len(rules))
	free := slices.Clone(s.free)
	for i := range rules {
		id := rules[i].ID
		if sl, ok := s.slots[id]; ok {
			slots[id] = sl
			continue
		}
		if len(free) == 0 {
			return fmt.Errorf("no FlowSpec counter slot is free: too many rules changed at once")
		}
		slots[id], free = free[len(free)-1], free[:len(free)-1]
	}
	g := 1 - s.gen
	var compiled [2]*flowFamily
	for f, rs := range fams {
		sl := make([]uint32, len(rs))
		for i := range rs {
			sl[i] = slots[rs[i].ID]
		}
		key := g*2 + uint32(f)
		c, err := compileFlowFamily(s.lay, rs, sl, f == 1, key*uint32(s.lay.rows), key*uint32(s.lay.max))
		if err != nil {
			return err
		}
		compiled[f] = c
	}
	for f, c := range compiled {
		if err := s.write(g, f, c); err != nil {
			return err
		}
	}
	if err := s.maps.Ctl.Update(uint32(0), g, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("switch the FlowSpec generation: %w", err)
	}
	if err := s.waitGrace(); err != nil {
		return err
	}
	s.gen = g
	// The slots let go: no frame counts in them any more.
	var gone []uint32
	for id, sl := range s.slots {
		if _, ok := slots[id]; !ok {
			gone = append(gone, sl)
		}
	}
	s.rules, s.slots, s.free = slices.Clone(rules), slots, free
	if err := s.save(); err != nil {
		return err
	}
	return s.release(gone)
}

// write writes family f's compiled tables c as generation g.
func (s *flowState) write(g uint32, f int, c *flowFamily) error {
	key := g*2 + uint32(f)
	for i, r := range c.rows {
		if err := s.maps.Rows.Update(key*uint32(s.lay.rows)+uint32(i), r, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write FlowSpec rows: %w", err)
		}
	}
	if n := len(c.rules); n > 0 {
		keys := make([]uint32, n)
		for i := range keys {
			keys[i] = key*uint32(s.lay.max) + uint32(i)
		}
		if _, err := s.maps.Rules.BatchUpdate(keys, c.rules, nil); err != nil {
			return fmt.Errorf("write FlowSpec rules: %w", err)
		}
	}
	// The prefixes: the generation's old entries out, the new ones in.
	trie := s.maps.Pfx4
	if f == 1 {
		trie = s.maps.Pfx6
	}
	old := s.written[g][f]
	s.written[g][f] = append(slices.Clone(old), c.prefixs...)
	for _, e := range old {
		if err := trie.Delete(flowTrieKey(g, e)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear FlowSpec prefix %s: %w", e.prefix, err)
		}
	}
	for _, e := range c.prefixs {
		if err := trie.Update(flowTrieKey(g, e), e.row, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write FlowSpec prefix %s: %w", e.prefix, err)
		}
	}
	s.written[g][f] = c.prefixs
	if err := s.maps.Tables.Update(key, unsafe.Slice((*byte)(unsafe.Pointer(&c.table)), unsafe.Sizeof(c.table)), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write FlowSpec table: %w", err)
	}
	return nil
}

// flowTrieKey is e's key in generation g.
func flowTrieKey(g uint32, e flowPrefixEntry) any {
	tag := uint8(g)<<1 | e.dir
	a := e.prefix.Addr()
	if a.Is4() {
		return xdpDropLpmV4Key{Prefixlen: uint32(8 + e.prefix.Bits()), Dir: tag, Addr: a.As4()}
	}
	return xdpDropLpmV6Key{Prefixlen: uint32(8 + e.prefix.Bits()), Dir: tag, Addr: a.As16()}
}

// release zeroes the slots let go, in the cells and every interface's
// counters, and frees them.
func (s *flowState) release(gone []uint32) error {
	if len(gone) == 0 {
		return nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	zeros := make([]xdpDropFsCount, cpus)
	for _, sl := range gone {
		if err := s.maps.Cells.Update(sl, xdpDropFsCell{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("zero FlowSpec cell: %w", err)
		}
		for m := range s.counters {
			if err := m.Update(sl, zeros, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("zero FlowSpec counters: %w", err)
			}
		}
	}
	s.free = append(s.free, gone...)
	return nil
}

// flowSaved is a rule's record in the saved set.
type flowSaved struct {
	Order int
	Rule  FlowRule
}

// save writes the set in force into the saved map, for a successor.
func (s *flowState) save() error {
	want := map[uint32]bool{}
	for i, r := range s.rules {
		j, err := json.Marshal(flowSaved{Order: i, Rule: r})
		if err != nil {
			return fmt.Errorf("save FlowSpec rule %q: %w", r.ID, err)
		}
		full := append(binary.LittleEndian.AppendUint32(nil, uint32(len(j))), j...)
		if len(full) > flowSavedChunk*flowSavedChunks {
			return fmt.Errorf("FlowSpec rule %q is too large to hand over (%d bytes)", r.ID, len(full))
		}
		sl := s.slots[r.ID]
		for c := 0; c*flowSavedChunk < len(full); c++ {
			chunk := make([]byte, flowSavedChunk)
			copy(chunk, full[c*flowSavedChunk:])
			k := sl<<4 | uint32(c)
			want[k] = true
			if err := s.maps.saved.Update(k, chunk, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("save FlowSpec rule %q: %w", r.ID, err)
			}
		}
	}
	var k uint32
	var stale []uint32
	val := make([]byte, flowSavedChunk)
	it := s.maps.saved.Iterate()
	for it.Next(&k, &val) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		s.maps.saved.Delete(k)
	}
	return nil
}

// rebuild reads the set in force from maps handed over: the generation,
// the rules with their slots, the prefix entries written.
func (s *flowState) rebuild() error {
	var gen uint32
	if err := s.maps.Ctl.Lookup(uint32(0), &gen); err != nil {
		return fmt.Errorf("read the handed-over FlowSpec generation: %w", err)
	}
	s.gen = gen & 1
	chunks := map[uint32][][]byte{}
	var k uint32
	val := make([]byte, flowSavedChunk)
	it := s.maps.saved.Iterate()
	for it.Next(&k, &val) {
		sl, c := k>>4, int(k&15)
		for len(chunks[sl]) <= c {
			chunks[sl] = append(chunks[sl], nil)
		}
		chunks[sl][c] = slices.Clone(val)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the handed-over FlowSpec rules: %w", err)
	}
	var saved []flowSaved
	used := map[uint32]bool{}
	for sl, cs := range chunks {
		full := slices.Concat(cs...)
		if len(full) < 4 {
			continue
		}
		n := int(binary.LittleEndian.Uint32(full))
		if n > len(full)-4 {
			return errors.New("a handed-over FlowSpec rule is cut short")
		}
		var r flowSaved
		if err := json.Unmarshal(full[4:4+n], &r); err != nil {
			return fmt.Errorf("read a handed-over FlowSpec rule: %w", err)
		}
		saved = append(saved, r)
		s.slots[r.Rule.ID] = sl
		used[sl] = true
	}
	sort.Slice(saved, func(i, j int) bool { return saved[i].Order < saved[j].Order })
	for _, r := range saved {
		s.rules = append(s.rules, r.Rule)
	}
	for i := range s.lay.slots() {
		if sl := uint32(s.lay.slots() - 1 - i); !used[sl] {
			s.free = append(s.free, sl)
			s.maps.Cells.Update(sl, xdpDropFsCell{}, ebpf.UpdateAny)
		}
	}
	// The prefixes of both generations, to be cleared before theirs is written again.
	var k4 xdpDropLpmV4Key
	var k6 xdpDropLpmV6Key
	var row uint32
	it = s.maps.Pfx4.Iterate()
	for it.Next(&k4, &row) {
		p := netip.PrefixFrom(netip.AddrFrom4(k4.Addr), int(k4.Prefixlen)-8)
		s.written[k4.Dir>>1&1][0] = append(s.written[k4.Dir>>1&1][0], flowPrefixEntry{dir: k4.Dir & 1, prefix: p})
	}
	it = s.maps.Pfx6.Iterate()
	for it.Next(&k6, &row) {
		p := netip.PrefixFrom(netip.AddrFrom16(k6.Addr), int(k6.Prefixlen)-8)
		s.written[k6.Dir>>1&1][1] = append(s.written[k6.Dir>>1&1][1], flowPrefixEntry{dir: k6.Dir & 1, prefix: p})
	}
	return nil
}

// Rules returns the set in force, in order (after a handover, the one
// handed over).
func (t *FlowTable) Rules() []FlowRule {
	s, err := t.state()
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rules)
}

// Memory is the kernel memory the FlowSpec maps take, as the kernel
// accounts it (the programs' counters aside).
func (t *FlowTable) Memory() (uint64, error) {
	s, err := t.state()
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, m := range s.maps.ordered() {
		n, err := mapMemory(m)
		if err != nil {
			return 0, fmt.Errorf("read FlowSpec map info: %w", err)
		}
		total += n
	}
	return total, nil
}

// FlowCounters returns the frames each rule in force matched and dropped
// on the program's interface, by FlowRule.ID, summed over CPUs; nil without
// FlowSpec.
func (p *Program) FlowCounters() (map[string]FlowCount, error) {
	if !p.in.policy.FlowSpec.On {
		return nil, nil
	}
	m, err := p.flowCountersMap()
	if err != nil {
		return nil, err
	}
	s, err := p.in.FlowSpec().state()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	slots := make(map[string]uint32, len(s.slots))
	for id, sl := range s.slots {
		slots[id] = sl
	}
	s.mu.Unlock()
	out := make(map[string]FlowCount, len(slots))
	var per []xdpDropFsCount
	for id, sl := range slots {
		if err := m.Lookup(sl, &per); err != nil {
			return nil, fmt.Errorf("read FlowSpec counters: %w", err)
		}
		var c FlowCount
		for _, v := range per {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.DroppedPackets += v.DroppedPackets
			c.DroppedBytes += v.DroppedBytes
		}
		out[id] = c
	}
	return out, nil
}

// flowCountersMap is the program's flowspec_counters, found among the
// maps of a program taken over in place the first time.
func (p *Program) flowCountersMap() (*ebpf.Map, error) {
	if p.flowCounters != nil {
		return p.flowCounters, nil
	}
	m, err := p.progMap(xdpDropMapFlowspecCounters)
	if err != nil {
		return nil, err
	}
	p.flowCounters = m
	p.registerFlowCounters()
	return m, nil
}

// progMap opens the map of the program named name.
func (p *Program) progMap(name string) (*ebpf.Map, error) {
	info, err := p.objs.Prog.Info()
	if err != nil {
		return nil, fmt.Errorf("read XDP program info: %w", err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil && mi.Name == name {
			return m, nil
		}
		m.Close()
	}
	return nil, fmt.Errorf("the program has no map %s", name)
}

// registerFlowCounters makes the program's counters zeroed with freed slots.
func (p *Program) registerFlowCounters() {
	if p.flowCounters == nil || p.in.bans == nil || p.in.bans.flow == nil {
		return
	}
	s := p.in.bans.flow
	s.mu.Lock()
	s.counters[p.flowCounters] = true
	s.mu.Unlock()
}

// addFlowMaps puts the FlowSpec maps of in and the program's counters
// (made the first time) in replace; nothing without FlowSpec.
func (p *Program) addFlowMaps(in *Instance, spec *ebpf.CollectionSpec, replace map[string]*ebpf.Map) error {
	if !in.policy.FlowSpec.On {
		return nil
	}
	s, err := in.FlowSpec().state()
	if err != nil {
		return err
	}
	for name, m := range s.maps.byName() {
		replace[name] = m
	}
	if p.flowCounters == nil && p.objs.Prog != nil {
		// A program taken over in place: its variants go on with its counters.
		if m, err := p.progMap(xdpDropMapFlowspecCounters); err == nil {
			p.flowCounters = m
		}
	}
	if p.flowCounters == nil {
		m, err := ebpf.NewMap(spec.Maps[xdpDropMapFlowspecCounters])
		if err != nil {
			return fmt.Errorf("create FlowSpec counters: %w", err)
		}
		p.flowCounters = m
	}
	s.mu.Lock()
	s.counters[p.flowCounters] = true
	s.mu.Unlock()
	replace[xdpDropMapFlowspecCounters] = p.flowCounters
	return nil
}

func (p *Program) closeFlowCounters() error {
	if p.flowCounters == nil {
		return nil
	}
	if p.in.bans != nil && p.in.bans.flow != nil {
		s := p.in.bans.flow
		s.mu.Lock()
		delete(s.counters, p.flowCounters)
		s.mu.Unlock()
	}
	err := p.flowCounters.Close()
	p.flowCounters = nil
	return err
}

// setFlowSpec sets the FlowSpec constants and sizes its maps; without
// FlowSpec the maps are made as small as they can be.
func setFlowSpec(spec *ebpf.CollectionSpec, policy Policy) error {
	if !policy.Bans.On {
		return nil
	}
	if err := policy.FlowSpec.check(); err != nil {
		return err
	}
	lay := newFlowLayout(policy.FlowSpec.max())
	on := policy.FlowSpec.On
	if err := spec.Variables[xdpDropVarFlowspecOn].Set(boolByte(on)); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarFlowspecOn, err)
	}
	if err := spec.Variables[xdpDropVarFlowspecWords].Set(uint32(lay.words)); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarFlowspecWords, err)
	}
	if !on {
		// Not read: the verifier removes the code when flowspec_on is 0.
		for _, name := range []string{xdpDropMapFlowspecTables, xdpDropMapFlowspecRules, xdpDropMapFlowspecCells, xdpDropMapFlowspecCounters, xdpDropMapFlowspecScratch} {
			m := spec.Maps[name]
			m.Key, m.Value = nil, nil
			m.KeySize, m.ValueSize, m.MaxEntries = 4, 8, 1
		}
		return nil
	}
	spec.Maps[xdpDropMapFlowspecRows].ValueSize = uint32(8 * lay.words)
	spec.Maps[xdpDropMapFlowspecRows].MaxEntries = uint32(4 * lay.rows)
	spec.Maps[xdpDropMapFlowspecRules].MaxEntries = uint32(4 * lay.max)
	spec.Maps[xdpDropMapFlowspecPfx4].MaxEntries = uint32(4 * lay.max)
	spec.Maps[xdpDropMapFlowspecPfx6].MaxEntries = uint32(4 * lay.max)
	spec.Maps[xdpDropMapFlowspecCells].MaxEntries = uint32(lay.slots())
	spec.Maps[xdpDropMapFlowspecCounters].MaxEntries = uint32(lay.slots())
	return nil
}

// flowFingerprint names the layout of the FlowSpec maps.
func (in *Instance) flowFingerprint() string {
	return fmt.Sprintf("%s %d", in.bansFingerprint(), in.policy.FlowSpec.max())
}

// FlowSpec is the FlowSpec table of the program's instance (Instance.FlowSpec):
// for a program of Load, which has an instance of its own.
func (p *Program) FlowSpec() *FlowTable { return p.in.FlowSpec() }
