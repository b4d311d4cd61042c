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

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

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
			return fmt.Errorf("save FlowSpec rule %s: %w", quote.Value(r.ID), err)
		}
		full := append(binary.LittleEndian.AppendUint32(nil, uint32(len(j))), j...)
		if len(full) > flowSavedChunk*flowSavedChunks {
			return fmt.Errorf("FlowSpec rule %s is too large to hand over (%d bytes)", quote.Value(r.ID), len(full))
		}
		sl := s.slots[r.ID]
		for c := 0; c*flowSavedChunk < len(full); c++ {
			chunk := make([]byte, flowSavedChunk)
			copy(chunk, full[c*flowSavedChunk:])
			k := sl<<4 | uint32(c)
			want[k] = true
			if err := s.maps.saved.Update(k, chunk, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("save FlowSpec rule %s: %w", quote.Value(r.ID), err)
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
	saved, slots, err := readSaved(s.maps.saved)
	if err != nil {
		return err
	}
	used := map[uint32]bool{}
	for id, sl := range slots {
		s.slots[id] = sl
		used[sl] = true
	}
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
	it := s.maps.Pfx4.Iterate()
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

// readSaved reads the set saved in m: the rules in enforcement order, and
// each one's slot by ID.
func readSaved(m *ebpf.Map) ([]flowSaved, map[string]uint32, error) {
	chunks := map[uint32][][]byte{}
	var k uint32
	val := make([]byte, flowSavedChunk)
	it := m.Iterate()
	for it.Next(&k, &val) {
		sl, c := k>>4, int(k&15)
		for len(chunks[sl]) <= c {
			chunks[sl] = append(chunks[sl], nil)
		}
		chunks[sl][c] = slices.Clone(val)
	}
	if err := it.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the saved FlowSpec rules: %w", err)
	}
	var saved []flowSaved
	slots := map[string]uint32{}
	for sl, cs := range chunks {
		full := slices.Concat(cs...)
		if len(full) < 4 {
			continue
		}
		n := int(binary.LittleEndian.Uint32(full))
		if n > len(full)-4 {
			return nil, nil, errors.New("a saved FlowSpec rule is cut short")
		}
		var r flowSaved
		if err := json.Unmarshal(full[4:4+n], &r); err != nil {
			return nil, nil, fmt.Errorf("read a saved FlowSpec rule: %w", err)
		}
		saved = append(saved, r)
		slots[r.Rule.ID] = sl
	}
	sort.Slice(saved, func(i, j int) bool { return saved[i].Order < saved[j].Order })
	return saved, slots, nil
}
