//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
)

// ruleMaps are the maps that hold an instance's rules: loaded and filled
// once, and given to the program of every interface in place of maps of
// its own (cilium/ebpf's MapReplacements).
type ruleMaps struct {
	PrefixBuckets *ebpf.Map `ebpf:"prefix_buckets"`
	PrefixExact   *ebpf.Map `ebpf:"prefix_exact"`
	PrefixV4      *ebpf.Map `ebpf:"prefix_v4"`
	PrefixV6      *ebpf.Map `ebpf:"prefix_v6"`
	Ports         *ebpf.Map `ebpf:"ports_map"`
	// LimitState is the limiter's cells, shared as the rules are, so that a
	// source's budget is the instance's; nil without limit rules.
	LimitState *ebpf.Map `ebpf:"limit_state"`
}

// ruleMapCount is how many maps ruleMaps holds without limit rules.
const ruleMapCount = 5

// loadRuleMaps creates the rule maps of spec and writes the rules into
// them; limits, when given, are limiter cells to go on with instead of
// fresh ones.
func loadRuleMaps(spec *ebpf.CollectionSpec, rules *ruleTables, limits *ebpf.Map) (*ruleMaps, error) {
	if err := memlock(); err != nil {
		return nil, memlockError(err)
	}
	m := &ruleMaps{}
	var opts *ebpf.CollectionOptions
	if limits != nil {
		opts = &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{xdpDropMapLimitState: limits}}
	}
	if err := spec.LoadAndAssign(m, opts); err != nil {
		return nil, loadError(err)
	}
	if err := m.fill(rules); err != nil {
		m.Close()
		return nil, err
	}
	if m.LimitState.MaxEntries() == 1 {
		// No limit rule: the programs make their own unused cell.
		m.LimitState.Close()
		m.LimitState = nil
	} else if limits == nil {
		if err := seedLimits(m.LimitState); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// byName are the maps by their names in the ELF, for MapReplacements.
func (m *ruleMaps) byName() map[string]*ebpf.Map {
	if m == nil {
		return map[string]*ebpf.Map{}
	}
	all := map[string]*ebpf.Map{
		xdpDropMapPrefixBuckets: m.PrefixBuckets,
		xdpDropMapPrefixExact:   m.PrefixExact,
		xdpDropMapPrefixV4:      m.PrefixV4,
		xdpDropMapPrefixV6:      m.PrefixV6,
		xdpDropMapPortsMap:      m.Ports,
	}
	if m.LimitState != nil {
		all[xdpDropMapLimitState] = m.LimitState
	}
	return all
}

func (m *ruleMaps) Close() error {
	var err error
	for _, mm := range m.byName() {
		err = errors.Join(err, mm.Close())
	}
	return err
}

// memory is the kernel memory the maps take, as the kernel accounts it.
func (m *ruleMaps) memory() (uint64, error) {
	var total uint64
	for name, mm := range m.byName() {
		n, err := mapMemory(mm)
		if err != nil {
			return 0, fmt.Errorf("read map %s info: %w", name, err)
		}
		total += n
	}
	return total, nil
}

func mapMemory(m *ebpf.Map) (uint64, error) {
	info, err := m.Info()
	if err != nil {
		return 0, err
	}
	n, _ := info.Memlock()
	return n, nil
}

// fill writes the rules' prefixes and port masks into the maps.
func (m *ruleMaps) fill(t *ruleTables) error {
	for dir, d := range []*prefixTables{&t.src, &t.dst} {
		if len(d.buckets) == 0 {
			continue
		}
		if err := m.fillPrefixes(d, dir); err != nil {
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
		if _, err := m.PrefixExact.BatchUpdate(keys, slots, nil); err != nil {
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
	if _, err := m.Ports.BatchUpdate(keys, masks, nil); err != nil {
		return fmt.Errorf("write port rules: %w", err)
	}
	return nil
}

// fillPrefixes writes one direction's prefix tables (dir 0: source, 1:
// destination) into the maps.
func (m *ruleMaps) fillPrefixes(t *prefixTables, dir int) error {
	keys := make([]uint32, len(t.buckets))
	for i := range keys {
		keys[i] = uint32(dir*len(t.buckets) + i)
	}
	if _, err := m.PrefixBuckets.BatchUpdate(keys, t.buckets, nil); err != nil {
		return fmt.Errorf("write prefix buckets: %w", err)
	}
	if len(t.trie4) > 0 {
		keys := make([]xdpDropLpmV4Key, 0, len(t.trie4))
		values := make([]uint64, 0, len(t.trie4))
		for p, mask := range t.trie4 {
			keys = append(keys, xdpDropLpmV4Key{Prefixlen: 8 + uint32(p.Bits()), Dir: uint8(dir), Addr: p.Addr().As4()})
			values = append(values, mask)
		}
		if err := batchUpdate(m.PrefixV4, keys, values); err != nil {
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
		if err := batchUpdate(m.PrefixV6, keys, values); err != nil {
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

// PrefixNote says, when there is something to say, how many exact prefixes
// the hash table could not hold within its ceiling and left to the trie:
// their frames are decided the same, at the trie's speed. Only a rule set
// built against the table's secret key, or rare bad luck, does that.
func (p *Program) PrefixNote() string {
	if p.in.rules == nil || p.in.rules.exact.overflowPrefixes == 0 {
		return ""
	}
	e := &p.in.rules.exact
	return fmt.Sprintf("%d exact prefixes (in %d buckets) did not fit the exact-prefix hash table within its ceiling of %d slots per prefix "+
		"and are looked up in the trie instead: decided the same, more slowly (bad luck, or a list built against this rule set's secret hash key, which a reload with the same rules keeps; changed rules draw another)", e.overflowPrefixes, e.overflowBuckets, exactRoom<<(maxExactGrowth+1))
}
