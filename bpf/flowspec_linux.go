//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/internal/quote"
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
	// Gone is the rule, withdrawn since the program's last FlowCounters
	// read; the counts are its final ones. Nil for a rule in force.
	Gone *FlowRule
}

// flowMaps are the FlowSpec maps an instance's programs share.
type flowMaps struct {
	Ctl, Tables, Rows, Rules, Pfx4, Pfx6, Cells, Scratch *ebpf.Map
	// saved holds the set in force (JSON, by slot and chunk), read by a
	// successor that adopts the maps and by a view (FlowRulesInForce);
	// peers the receiver's peers' states (WritePeers). No program reads
	// them: a branch never taken references them, so that they are among
	// the program's maps.
	saved, peers *ebpf.Map
}

// flowMapCount is how many maps flowMaps holds, handed over in ordered's order.
const flowMapCount = 10

func (m *flowMaps) ordered() []*ebpf.Map {
	return []*ebpf.Map{m.Ctl, m.Tables, m.Rows, m.Rules, m.Pfx4, m.Pfx6, m.Cells, m.Scratch, m.saved, m.peers}
}

// byName are the maps programs use, by their names in the ELF.
func (m *flowMaps) byName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		xdpDropMapFlowspecCtl: m.Ctl, xdpDropMapFlowspecTables: m.Tables, xdpDropMapFlowspecRows: m.Rows,
		xdpDropMapFlowspecRules: m.Rules, xdpDropMapFlowspecPfx4: m.Pfx4, xdpDropMapFlowspecPfx6: m.Pfx6,
		xdpDropMapFlowspecCells: m.Cells, xdpDropMapFlowspecScratch: m.Scratch,
		xdpDropMapFlowspecSaved: m.saved, xdpDropMapFlowspecPeers: m.peers,
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
	// gone are, per program's counters, the rules withdrawn since its last
	// FlowCounters read, with their final counts (at most lay.slots()).
	gone map[*ebpf.Map]map[string]FlowCount
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
	return c.checkExempt()
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
		Saved   *ebpf.Map `ebpf:"flowspec_saved"`
		Peers   *ebpf.Map `ebpf:"flowspec_peers"`
	}
	if err := spec.LoadAndAssign(&lm, nil); err != nil {
		return nil, loadError(err)
	}
	m := &flowMaps{Ctl: lm.Ctl, Tables: lm.Tables, Rows: lm.Rows, Rules: lm.Rules, Pfx4: lm.Pfx4, Pfx6: lm.Pfx6, Cells: lm.Cells, Scratch: lm.Scratch,
		saved: lm.Saved, peers: lm.Peers}
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
	s := &flowState{maps: m, lay: lay, slots: map[string]uint32{}, counters: map[*ebpf.Map]bool{}, gone: map[*ebpf.Map]map[string]FlowCount{}}
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
//
// When a family's rules need more classes of values or flow label
// boundaries than its tables hold, Set puts in force the longest prefix of
// the family's rules (the first rules first) that fits, and returns a
// *FlowCapacityError naming the rules left out; Rules returns the rules in
// force.
func (t *FlowTable) Set(rules []FlowRule) error {
	s, err := t.state()
	if err != nil {
		return err
	}
	return s.set(rules)
}

// FlowCapacityError is Set's error when the rules of a family do not all
// fit the engine's tables: the rules before Refused are in force, Refused
// (rule IDs, in the set's order) are not.
type FlowCapacityError struct {
	// Refused are the IDs of the rules left out, in the set's order.
	Refused []string
	// why are the limits passed, by family.
	why []string
}

// RefusedIDs are the IDs of the rules left out, for the receiver to
// refuse each with its reason.
func (e *FlowCapacityError) RefusedIDs() []string { return e.Refused }

func (e *FlowCapacityError) Error() string {
	return fmt.Sprintf("%d FlowSpec rules not enforced (the last ones of their family, from %s on): %s; "+
		"the rules before them are in force", len(e.Refused), quote.Value(e.Refused[0]), strings.Join(e.why, "; "))
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
	refused := map[string]bool{}
	var whys []string
	for f, rs := range fams {
		sl := make([]uint32, len(rs))
		for i := range rs {
			sl[i] = slots[rs[i].ID]
		}
		key := g*2 + uint32(f)
		c, n, why, err := fitFlowFamily(s.lay, rs, sl, f == 1, key*uint32(s.lay.rows), key*uint32(s.lay.max))
		if err != nil {
			return err
		}
		if why != nil {
			for _, r := range rs[n:] {
				refused[r.ID] = true
			}
			whys = append(whys, fmt.Sprintf("%d of %s: with them the family would need more than %d %s",
				len(rs)-n, [2]string{"IPv4", "IPv6"}[f], why.limit, why.what))
		}
		compiled[f] = c
	}
	var capErr *FlowCapacityError
	if len(refused) > 0 {
		capErr = &FlowCapacityError{why: whys}
		kept := make([]FlowRule, 0, len(rules)-len(refused))
		for i := range rules {
			id := rules[i].ID
			if !refused[id] {
				kept = append(kept, rules[i])
				continue
			}
			capErr.Refused = append(capErr.Refused, id)
			if _, had := s.slots[id]; !had {
				free = append(free, slots[id])
			}
			delete(slots, id)
		}
		rules = kept
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
	gone := map[string]uint32{}
	for id, sl := range s.slots {
		if _, ok := slots[id]; !ok {
			gone[id] = sl
		}
	}
	withdrawn := make(map[string]*FlowRule, len(gone))
	for i := range s.rules {
		if _, ok := gone[s.rules[i].ID]; ok {
			r := s.rules[i]
			withdrawn[r.ID] = &r
		}
	}
	s.rules, s.slots, s.free = slices.Clone(rules), slots, free
	if err := s.save(); err != nil {
		return err
	}
	if err := s.release(gone, withdrawn); err != nil {
		return err
	}
	if capErr != nil {
		return capErr
	}
	return nil
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
	n, exempt := policy.FlowSpec.exempt()
	if err := spec.Variables[xdpDropVarFlowspecExemptN].Set(n); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarFlowspecExemptN, err)
	}
	if err := spec.Variables[xdpDropVarFlowspecExempt].Set(exempt); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarFlowspecExempt, err)
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
	// BPF_F_NO_PREALLOC (in flowspec.h): memory for the records there only.
	spec.Maps[xdpDropMapFlowspecSaved].ValueSize = flowSavedChunk
	spec.Maps[xdpDropMapFlowspecSaved].MaxEntries = uint32(lay.slots() * 4)
	spec.Maps[xdpDropMapFlowspecPeers].ValueSize = flowPeerRecord
	spec.Maps[xdpDropMapFlowspecPeers].MaxEntries = FlowMaxPeers
	return nil
}

// flowFingerprint names the layout of the FlowSpec maps.
func (in *Instance) flowFingerprint() string {
	return fmt.Sprintf("%s %d", in.bansFingerprint(), in.policy.FlowSpec.max())
}

// FlowSpec is the FlowSpec table of the program's instance (Instance.FlowSpec):
// for a program of Load, which has an instance of its own.
func (p *Program) FlowSpec() *FlowTable { return p.in.FlowSpec() }
