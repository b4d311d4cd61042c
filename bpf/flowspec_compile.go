package bpf

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// The kernel's FlowSpec tables (flowspec.h), compiled here from a rule
// set by evaluating FlowComponent.Match on the elementary intervals of each
// dimension: between two boundaries of its terms every value satisfies the
// same rules, so a dimension costs its boundaries, not its domain.

// flowDim is one numeric or bitmask dimension of the engine.
type flowDim struct {
	dim     int
	domain  int // values 0..domain-1
	bitmask bool
	get     func(r *FlowRule) FlowComponent
	// absent: a frame may lack the field (ports, ICMP, TCP flags).
	absent bool
}

var flowDims = []flowDim{
	{dim: int(xdpDropFlowspecDimsFS_DIM_PROTO), domain: 256, get: func(r *FlowRule) FlowComponent { return r.Proto }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_PORT), domain: 65536, absent: true, get: func(r *FlowRule) FlowComponent { return r.Port }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_DPORT), domain: 65536, absent: true, get: func(r *FlowRule) FlowComponent { return r.DstPort }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_SPORT), domain: 65536, absent: true, get: func(r *FlowRule) FlowComponent { return r.SrcPort }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_ICMP_TYPE), domain: 256, absent: true, get: func(r *FlowRule) FlowComponent { return r.ICMPType }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_ICMP_CODE), domain: 256, absent: true, get: func(r *FlowRule) FlowComponent { return r.ICMPCode }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_TCP_FLAGS), domain: 4096, bitmask: true, absent: true, get: func(r *FlowRule) FlowComponent { return r.TCPFlags }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_LENGTH), domain: 65536, get: func(r *FlowRule) FlowComponent { return r.PacketLength }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_DSCP), domain: 64, get: func(r *FlowRule) FlowComponent { return r.DSCP }},
	{dim: int(xdpDropFlowspecDimsFS_DIM_FRAG), domain: 16, bitmask: true, get: (*FlowRule).fragment},
	{dim: int(xdpDropFlowspecDimsFS_DIM_LABEL), domain: 1 << 20, get: func(r *FlowRule) FlowComponent { return r.FlowLabel }},
}

const (
	flowDimDst   = int(xdpDropFlowspecDimsFS_DIM_DST)
	flowDimSrc   = int(xdpDropFlowspecDimsFS_DIM_SRC)
	flowDimLabel = int(xdpDropFlowspecDimsFS_DIM_LABEL)
	flowWordsMax = int(xdpDropFlowspecLimitsFS_WORDS_MAX)
	flowLabels   = int(xdpDropFlowspecLimitsFS_LABELS)
)

// flowBurst is how long a limit rule's burst lasts: a tenth of a second
// of its rate, at least one frame.
const flowBurst = 100 * 1e6 // ns

// flowLayout is the size of an instance's FlowSpec tables, fixed at load.
type flowLayout struct {
	max   int // rules a family
	words int // of a row
	rows  int // rows a generation and family
}

// slots is how many counter slots a layout has: room for a whole new set
// of both families while the old one's are still being let go.
func (l flowLayout) slots() int { return 4 * l.max }

func newFlowLayout(max int) flowLayout {
	if max <= 0 {
		max = FlowMaxRules
	}
	return flowLayout{max: max, words: (max + 63) / 64, rows: 16*max + 64}
}

// flowPrefixEntry is a prefix trie entry: its key's direction and prefix, its row.
type flowPrefixEntry struct {
	dir    uint8
	prefix netip.Prefix
	row    uint32
}

// flowFamily is one family's compiled tables, for one generation.
type flowFamily struct {
	table   xdpDropFsTable
	rows    [][]uint64 // by row, from the region's first
	rules   []xdpDropFsRule
	prefixs []flowPrefixEntry
}

// bitset is a rule bitmap of a row.
type bitset []uint64

func (b bitset) set(i int)     { b[i/64] |= 1 << (i % 64) }
func (b bitset) clone() bitset { return slices.Clone(b) }
func (b bitset) key() string {
	buf := make([]byte, 8*len(b))
	for i, w := range b {
		binary.LittleEndian.PutUint64(buf[8*i:], w)
	}
	return string(buf)
}

// rowAlloc hands out a family's rows, deduplicating equal bitmaps within a dimension.
type rowAlloc struct {
	lay  flowLayout
	base uint32 // the region's first row in flowspec_rows
	rows [][]uint64
}

func (a *rowAlloc) add(b bitset) (uint32, error) {
	if len(a.rows) >= a.lay.rows {
		return 0, &flowCapacity{what: "distinct classes of values", limit: a.lay.rows}
	}
	a.rows = append(a.rows, b)
	return uint32(len(a.rows) - 1), nil
}

// classes dedups bitmaps within a dimension: the class of each, and its rows from base.
type classes struct {
	a     *rowAlloc
	base  uint32
	byKey map[string]uint16
}

func newClasses(a *rowAlloc) *classes {
	return &classes{a: a, base: uint32(len(a.rows)), byKey: map[string]uint16{}}
}

func (c *classes) of(b bitset) (uint16, error) {
	k := b.key()
	if id, ok := c.byKey[k]; ok {
		return id, nil
	}
	row, err := c.a.add(b)
	if err != nil {
		return 0, err
	}
	id := row - c.base
	if id > math.MaxUint16 {
		return 0, &flowCapacity{what: "classes of values in a dimension", limit: math.MaxUint16 + 1}
	}
	c.byKey[k] = uint16(id)
	return uint16(id), nil
}

// compileFlowFamily compiles rules (one family, in order) for the region
// of rows starting at rowBase and the rules at ruleBase; slots are the
// rules' counter slots.
func compileFlowFamily(lay flowLayout, rules []FlowRule, slots []uint32, v6 bool, rowBase, ruleBase uint32) (*flowFamily, error) {
	f := &flowFamily{}
	t := &f.table
	if len(rules) == 0 {
		return f, nil
	}
	a := &rowAlloc{lay: lay, base: rowBase}
	t.RuleBase = ruleBase
	// The words of a row the kernel walks: those the set's rules take.
	t.Words = uint32(min(lay.words, max(1, (len(rules)+63)/64)))
	t.Dims = 1 << xdpDropFlowspecDimsFS_DIM_PROTO
	for _, d := range flowDims {
		if d.dim == flowDimLabel && !v6 {
			continue
		}
		if err := compileFlowDim(lay, a, t, d, rules); err != nil {
			return nil, err
		}
	}
	for _, dir := range []int{flowDimDst, flowDimSrc} {
		if err := compileFlowPrefixes(lay, a, f, dir, rules); err != nil {
			return nil, err
		}
	}
	for i := range t.Base {
		t.Base[i] += rowBase
		t.Absent[i] += rowBase
	}
	for i := range f.prefixs {
		f.prefixs[i].row += rowBase
	}
	f.rows = a.rows
	f.rules = make([]xdpDropFsRule, len(rules))
	for i := range rules {
		f.rules[i] = flowRuleEntry(&rules[i], slots[i])
	}
	return f, nil
}

// compileFlowDim fills the class table of dimension d and its rows.
func compileFlowDim(lay flowLayout, a *rowAlloc, t *xdpDropFsTable, d flowDim, rules []FlowRule) error {
	wild := make(bitset, lay.words)
	var with []int
	for i := range rules {
		if d.get(&rules[i]) == nil {
			wild.set(i)
		} else {
			with = append(with, i)
		}
	}
	if len(with) == 0 && d.dim != int(xdpDropFlowspecDimsFS_DIM_PROTO) {
		return nil
	}
	t.Dims |= 1 << d.dim
	c := newClasses(a)
	t.Base[d.dim] = c.base
	if d.absent {
		// A frame without the field: the rules without the component only.
		id, err := c.of(wild)
		if err != nil {
			return err
		}
		t.Absent[d.dim] = c.base + uint32(id)
	}
	// The elementary intervals: every boundary of every term.
	var bounds []uint64
	if d.bitmask {
		// A bitmask match depends only on the bits some term names.
		var union uint64
		for _, i := range with {
			for _, term := range d.get(&rules[i]) {
				union |= term.Value
			}
		}
		union &= uint64(d.domain - 1)
		return compileFlowBitmask(t, c, d, rules, with, wild, union)
	}
	bounds = append(bounds, 0)
	for _, i := range with {
		for _, term := range d.get(&rules[i]) {
			if term.Value < uint64(d.domain) {
				bounds = append(bounds, term.Value)
			}
			if term.Value+1 < uint64(d.domain) {
				bounds = append(bounds, term.Value+1)
			}
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	// Each interval's bitmap: the rules whose component holds at its start.
	maps := make([]bitset, len(bounds))
	for k := range maps {
		maps[k] = wild.clone()
	}
	memo := map[string][]bool{}
	for _, i := range with {
		comp := d.get(&rules[i])
		key := fmt.Sprint(comp)
		truth, ok := memo[key]
		if !ok {
			truth = make([]bool, len(bounds))
			for k, b := range bounds {
				truth[k] = comp.Match(b, false)
			}
			memo[key] = truth
		}
		for k, ok := range truth {
			if ok {
				maps[k].set(i)
			}
		}
	}
	ids := make([]uint16, len(bounds))
	for k, m := range maps {
		id, err := c.of(m)
		if err != nil {
			return err
		}
		ids[k] = id
	}
	if d.dim == flowDimLabel {
		if len(bounds)-1 > flowLabels-1 {
			return &flowCapacity{what: "flow label boundaries", limit: flowLabels - 1}
		}
		t.Nlabels = uint32(len(bounds) - 1)
		for k := range t.LabelBound {
			t.LabelBound[k] = math.MaxUint32
		}
		for k := range ids {
			t.LabelClass[k] = ids[k]
			if k > 0 {
				t.LabelBound[k-1] = uint32(bounds[k])
			}
		}
		return nil
	}
	table := flowClassTable(t, d.dim)
	for k := range bounds {
		end := d.domain
		if k+1 < len(bounds) {
			end = int(bounds[k+1])
		}
		for v := int(bounds[k]); v < end; v++ {
			table[v] = ids[k]
		}
	}
	return nil
}

// compileFlowBitmask fills a bitmask dimension, whose matches depend on
// value & union only: every subset of union is evaluated once.
func compileFlowBitmask(t *xdpDropFsTable, c *classes, d flowDim, rules []FlowRule, with []int, wild bitset, union uint64) error {
	// The subsets of union, enumerated (Gosper-free: sub = (sub - union) & union).
	var subs []uint64
	for sub := uint64(0); ; sub = (sub - union) & union {
		subs = append(subs, sub)
		if sub == union {
			break
		}
	}
	idOf := make(map[uint64]uint16, len(subs))
	memo := map[string][]bool{}
	truths := make([][]bool, len(with))
	for j, i := range with {
		comp := d.get(&rules[i])
		key := fmt.Sprint(comp)
		truth, ok := memo[key]
		if !ok {
			truth = make([]bool, len(subs))
			for k, s := range subs {
				truth[k] = comp.Match(s, true)
			}
			memo[key] = truth
		}
		truths[j] = truth
	}
	for k, s := range subs {
		m := wild.clone()
		for j, i := range with {
			if truths[j][k] {
				m.set(i)
			}
		}
		id, err := c.of(m)
		if err != nil {
			return err
		}
		idOf[s] = id
	}
	table := flowClassTable(t, d.dim)
	for v := range d.domain {
		table[v] = idOf[uint64(v)&union]
	}
	return nil
}

// flowClassTable is the class table of a dimension in t.
func flowClassTable(t *xdpDropFsTable, dim int) []uint16 {
	switch dim {
	case int(xdpDropFlowspecDimsFS_DIM_PROTO):
		return t.Proto[:]
	case int(xdpDropFlowspecDimsFS_DIM_PORT):
		return t.Port[:]
	case int(xdpDropFlowspecDimsFS_DIM_DPORT):
		return t.Dport[:]
	case int(xdpDropFlowspecDimsFS_DIM_SPORT):
		return t.Sport[:]
	case int(xdpDropFlowspecDimsFS_DIM_ICMP_TYPE):
		return t.IcmpType[:]
	case int(xdpDropFlowspecDimsFS_DIM_ICMP_CODE):
		return t.IcmpCode[:]
	case int(xdpDropFlowspecDimsFS_DIM_TCP_FLAGS):
		return t.TcpFlags[:]
	case int(xdpDropFlowspecDimsFS_DIM_LENGTH):
		return t.Length[:]
	case int(xdpDropFlowspecDimsFS_DIM_DSCP):
		return t.Dscp[:]
	case int(xdpDropFlowspecDimsFS_DIM_FRAG):
		return t.Frag[:]
	}
	panic(fmt.Sprintf("flowspec dimension %d has no class table", dim))
}

// flowPrefixOf is the prefix of direction dir of r.
func flowPrefixOf(r *FlowRule, dir int) *FlowPrefix {
	if dir == flowDimDst {
		return r.Dst
	}
	return r.Src
}

// flowTrieMatched: a prefix the vector stage matches by the trie (not
// with an offset, not of length 0).
func flowTrieMatched(p *FlowPrefix) bool {
	return p != nil && p.Offset == 0 && p.Prefix.Bits() > 0
}

// compileFlowPrefixes makes the rows and trie entries of a prefix
// dimension: each distinct prefix's row holds the rules whose prefix
// contains it, besides those without one (or with an offset, checked
// later): the trie's longest match finds it.
func compileFlowPrefixes(lay flowLayout, a *rowAlloc, f *flowFamily, dir int, rules []FlowRule) error {
	t := &f.table
	wild := make(bitset, lay.words)
	var with []int
	var prefixes []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for i := range rules {
		p := flowPrefixOf(&rules[i], dir)
		if !flowTrieMatched(p) {
			wild.set(i)
			continue
		}
		with = append(with, i)
		m := p.Prefix.Masked()
		if !seen[m] {
			seen[m] = true
			prefixes = append(prefixes, m)
		}
	}
	if len(with) == 0 {
		return nil
	}
	t.Dims |= 1 << dir
	c := newClasses(a)
	t.Base[dir] = c.base
	id, err := c.of(wild)
	if err != nil {
		return err
	}
	t.Absent[dir] = c.base + uint32(id)
	// Shortest first: a prefix's row is that of the longest shorter one containing it, plus its own rules.
	sort.Slice(prefixes, func(i, j int) bool { return prefixes[i].Bits() < prefixes[j].Bits() })
	kdir := uint8(0)
	if dir == flowDimDst {
		kdir = uint8(xdpDropPrefixLimitsPREFIX_DIR_DST)
	}
	for _, p := range prefixes {
		m := wild.clone()
		for _, i := range with {
			q := flowPrefixOf(&rules[i], dir).Prefix.Masked()
			if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				m.set(i)
			}
		}
		id, err := c.of(m)
		if err != nil {
			return err
		}
		f.prefixs = append(f.prefixs, flowPrefixEntry{dir: kdir, prefix: p, row: c.base + uint32(id)})
	}
	return nil
}

// flowRuleEntry is rule r's entry in flowspec_rules.
func flowRuleEntry(r *FlowRule, slot uint32) xdpDropFsRule {
	e := xdpDropFsRule{Slot: slot}
	switch r.Action {
	case FlowDrop:
		e.Action = uint8(xdpDropFlowspecBitsFS_ACT_DROP)
	case FlowLimit:
		e.Action = uint8(xdpDropFlowspecBitsFS_ACT_LIMIT)
		cost := 1e9 * 65536 / r.Rate
		e.Cost = uint64(max(1, min(cost, 1<<62)))
		e.Tau = flowBurst
		if !r.RateBytes {
			// Burst frames: a tenth of a second's, the first frame included.
			e.Tau = uint64(max(0, flowBurst-1e9/r.Rate))
		} else {
			e.Flags |= uint8(xdpDropFlowspecBitsFS_RULE_BYTES)
		}
	}
	if r.Continue {
		e.Flags |= uint8(xdpDropFlowspecBitsFS_RULE_CONTINUE)
	}
	if r.Sample {
		e.Flags |= uint8(xdpDropFlowspecBitsFS_RULE_SAMPLE)
	}
	if r.Dst != nil && !flowTrieMatched(r.Dst) && r.Dst.Offset != 0 {
		e.Flags |= uint8(xdpDropFlowspecBitsFS_RULE_DST_OFFSET)
		e.DstMask, e.DstPat = flowPattern(r.Dst)
	}
	if r.Src != nil && !flowTrieMatched(r.Src) && r.Src.Offset != 0 {
		e.Flags |= uint8(xdpDropFlowspecBitsFS_RULE_SRC_OFFSET)
		e.SrcMask, e.SrcPat = flowPattern(r.Src)
	}
	return e
}

// flowPattern is the mask of bits Offset..Bits-1 and the pattern of p, as
// network order words (in the host's order of the bytes).
func flowPattern(p *FlowPrefix) (mask, pat [4]uint32) {
	var mb [16]byte
	for i := int(p.Offset); i < p.Prefix.Bits(); i++ {
		mb[i/8] |= 0x80 >> (i % 8)
	}
	ab := p.Prefix.Addr().As16()
	for w := range 4 {
		mask[w] = binary.NativeEndian.Uint32(mb[4*w:])
		var pw [4]byte
		for j := range 4 {
			pw[j] = ab[4*w+j] & mb[4*w+j]
		}
		pat[w] = binary.NativeEndian.Uint32(pw[:])
	}
	return mask, pat
}

// flowSplit checks a set and splits it by family, in order.
func flowSplit(rules []FlowRule, max int) (fams [2][]FlowRule, err error) {
	ids := make(map[string]bool, len(rules))
	for i := range rules {
		r := &rules[i]
		if ids[r.ID] {
			return fams, fmt.Errorf("FlowSpec rule ID %s appears twice in the set", quote.Value(r.ID))
		}
		ids[r.ID] = true
		if err := FlowExpressible(r); err != nil {
			return fams, fmt.Errorf("FlowSpec rule %s cannot be enforced: %w", quote.Value(r.ID), err)
		}
		f := 0
		if r.IPv6 {
			f = 1
		}
		fams[f] = append(fams[f], *r)
	}
	for f, rs := range fams {
		if len(rs) > max {
			return fams, fmt.Errorf("%d FlowSpec rules of %s, over the most a family holds, %d (max_rules)", len(rs), [2]string{"IPv4", "IPv6"}[f], max)
		}
	}
	return fams, nil
}
