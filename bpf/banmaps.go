//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// BanCounts are one interface's frames bans decided, by origin and action
// (BanCounts[origin][action]), summed over CPUs (Program.BanCounters).
type BanCounts [BanOrigins][banActions]Counter

// release lets one instance's use of the table go, closing the maps with
// the last.
func (t *BanTable) release() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.users--
	if t.users > 0 {
		return nil
	}
	if t.history != nil {
		t.history.Close()
	}
	var err error
	if t.flow != nil {
		err = t.flow.close()
	}
	return errors.Join(err, t.maps.Close())
}

// ContinueBans makes the ban table of prev, when it has one loaded, in's
// too, so that the bans in force go on in in's programs: for the instance
// of a new generation of the same policy (SwapRules calls it). Call it
// before in's first program; it does nothing when in has a table already
// or no bans.
func (in *Instance) ContinueBans(prev *Instance) {
	if in == prev {
		return
	}
	prev.mu.Lock()
	t := prev.bans
	prev.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if t == nil || in.bans != nil || !in.policy.Bans.On || in.policy.Bans.max() != t.max {
		return
	}
	if (t.flow != nil) != in.policy.FlowSpec.On || t.flow != nil && t.flow.lay != newFlowLayout(in.policy.FlowSpec.max()) {
		return
	}
	t.mu.Lock()
	t.users++
	t.mu.Unlock()
	in.bans = t
}

// banMaps are the ban maps of an instance.
type banMaps struct {
	V4      *ebpf.Map `ebpf:"ban_v4"`
	V6      *ebpf.Map `ebpf:"ban_v6"`
	Buckets *ebpf.Map `ebpf:"ban_buckets"`
	Bloom   *ebpf.Map `ebpf:"ban_bloom"`
}

func (m *banMaps) ordered() []*ebpf.Map { return []*ebpf.Map{m.V4, m.V6, m.Buckets, m.Bloom} }

func (m *banMaps) byName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{xdpDropMapBanV4: m.V4, xdpDropMapBanV6: m.V6, xdpDropMapBanBuckets: m.Buckets, xdpDropMapBanBloom: m.Bloom}
}

func (m *banMaps) Close() error {
	var err error
	for _, mm := range m.ordered() {
		err = errors.Join(err, mm.Close())
	}
	return err
}

var errBansOff = errors.New("bans are not on in this instance's policy")

// Bans returns the instance's ban table, loading its maps the first time;
// an error when the policy has no bans (Policy.Bans.On). Every program of
// the instance, loaded before or after, runs on the same maps. After a
// handover call it once AdoptRules has run: the table is then the one
// handed over, its index rebuilt from the maps.
func (in *Instance) Bans() (*BanTable, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.bansLocked()
}

func (in *Instance) bansLocked() (*BanTable, error) {
	if !in.policy.Bans.On {
		return nil, errBansOff
	}
	if in.bans != nil {
		return in.bans, nil
	}
	rules, err := in.compiledLocked()
	if err != nil {
		return nil, err
	}
	spec, err := in.specOf(rules)
	if err != nil {
		return nil, err
	}
	if err := memlock(); err != nil {
		return nil, memlockError(err)
	}
	m := &banMaps{}
	if err := spec.LoadAndAssign(m, nil); err != nil {
		return nil, loadError(err)
	}
	t := newBanTable(m, in.policy.Bans.max())
	if in.policy.FlowSpec.On {
		if t.flow, err = newFlowState(spec, newFlowLayout(in.policy.FlowSpec.max())); err != nil {
			m.Close()
			return nil, err
		}
	}
	in.bans = t
	return in.bans, nil
}

// banMapsByName are the instance's ban maps by their names in the ELF, for
// MapReplacements: none without bans.
func (in *Instance) banMapsByName() (map[string]*ebpf.Map, error) {
	if !in.policy.Bans.On {
		return nil, nil
	}
	t, err := in.Bans()
	if err != nil {
		return nil, err
	}
	return t.maps.byName(), nil
}

// setBanSpec sizes the ban maps and sets the bans' dry run; without bans
// the maps are not loaded.
func setBanSpec(spec *ebpf.CollectionSpec, policy Policy) error {
	if !policy.Bans.On {
		return nil
	}
	if err := policy.Bans.check(); err != nil {
		return err
	}
	if err := spec.Variables[xdpDropVarBanDryRun].Set(boolByte(policy.Bans.DryRun)); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarBanDryRun, err)
	}
	if err := spec.Variables[xdpDropVarBanFakeClock].Set(boolByte(limitFakeClock)); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarBanFakeClock, err)
	}
	n := uint32(policy.Bans.max() + MaxBanAllow)
	spec.Maps[xdpDropMapBanV4].MaxEntries = n
	spec.Maps[xdpDropMapBanV6].MaxEntries = n
	return nil
}

// check checks the bans' settings of a policy.
func (c BansConfig) check() error {
	if c.Max < 0 || c.Max > MaxBanLimit {
		return fmt.Errorf("bans max %d is out of range: give 1 to %d, or 0 for %d", c.Max, MaxBanLimit, DefaultBanMax)
	}
	return nil
}

// Memory is the kernel memory the ban maps take, as the kernel accounts it.
func (t *BanTable) Memory() (uint64, error) {
	var total uint64
	for name, m := range t.maps.byName() {
		n, err := mapMemory(m)
		if err != nil {
			return 0, fmt.Errorf("read map %s info: %w", name, err)
		}
		total += n
	}
	return total, nil
}

// setClock sets the bans' test clock, which the programs loaded with
// limitFakeClock read instead of the kernel's.
func (t *BanTable) setClock(ns uint64) error {
	return t.maps.Bloom.Update(uint32(xdpDropBanLimitsBAN_CLOCK_WORD), ns, ebpf.UpdateAny)
}

// rebuild makes the index again from the maps, handed over by another
// instance, every origin's claim with it (each entry holds them), and
// writes every filter word and bucket as the entries make them.
func (t *BanTable) rebuild() error {
	var k4 xdpDropBanV4Key
	var k6 xdpDropBanV6Key
	var v xdpDropBanValue
	add := func(p netip.Prefix) {
		x := &t.index[family(p)]
		bv := valueOf(v)
		x.entries[p] = bv
		x.adjust(bv, 1, p)
		t.filter.count(p, 1)
		x.count(p, 1)
	}
	it := t.maps.V4.Iterate()
	for it.Next(&k4, &v) {
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], k4.Addr)
		add(netip.PrefixFrom(netip.AddrFrom4(a), int(k4.Len)))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read handed-over IPv4 bans: %w", err)
	}
	it = t.maps.V6.Iterate()
	for it.Next(&k6, &v) {
		var a [16]byte
		for i, w := range k6.Addr {
			binary.NativeEndian.PutUint32(a[4*i:], w)
		}
		add(netip.PrefixFrom(netip.AddrFrom16(a), int(k6.Len)))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read handed-over IPv6 bans: %w", err)
	}
	keys := make([]uint32, banFilterWords)
	vals := make([]uint64, banFilterWords)
	for i := range keys {
		keys[i], vals[i] = uint32(i), t.filter.words[uint32(i)]
	}
	if _, err := t.maps.Bloom.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("write ban filter: %w", err)
	}
	for fam := range t.index {
		if err := t.writeAllBuckets(fam); err != nil {
			return err
		}
	}
	return nil
}

// BanCounters returns the frames bans decided on the program's interface,
// by origin and action, summed over CPUs; zero without bans.
func (p *Program) BanCounters() (BanCounts, error) {
	var out BanCounts
	m, err := p.banCountersMap()
	if m == nil || err != nil {
		return out, err
	}
	var per []xdpDropBanBlock
	if err := m.Lookup(uint32(0), &per); err != nil {
		return out, fmt.Errorf("read ban counters: %w", err)
	}
	for _, b := range per {
		for o := range out {
			for a := range out[o] {
				out[o][a].Packets += b.C[o][a].Packets
				out[o][a].Bytes += b.C[o][a].Bytes
			}
		}
	}
	return out, nil
}

// banCountersMap is the program's ban_counters, found among the maps of a
// program taken over in place the first time; nil without bans.
func (p *Program) banCountersMap() (*ebpf.Map, error) {
	if p.banCounters != nil || !p.in.policy.Bans.On {
		return p.banCounters, nil
	}
	m, err := p.progMap(xdpDropMapBanCounters)
	if err != nil {
		return nil, fmt.Errorf("the program has no ban counters: %w", err)
	}
	p.banCounters = m
	return m, nil
}

// addBanMaps puts the ban maps of in, the program's instance or the one it
// swaps into, and the program's ban counters (made the first time) in
// replace; nothing without bans.
func (p *Program) addBanMaps(in *Instance, spec *ebpf.CollectionSpec, replace map[string]*ebpf.Map) error {
	shared, err := in.banMapsByName()
	if err != nil || shared == nil {
		return err
	}
	for name, m := range shared {
		replace[name] = m
	}
	if p.banCounters == nil && p.objs.Prog != nil {
		// A program taken over in place: its variants go on with its counters.
		p.banCountersMap()
	}
	if p.banCounters == nil {
		m, err := ebpf.NewMap(spec.Maps[xdpDropMapBanCounters])
		if err != nil {
			return fmt.Errorf("create ban counters: %w", err)
		}
		p.banCounters = m
	}
	replace[xdpDropMapBanCounters] = p.banCounters
	return p.addFlowMaps(in, spec, replace)
}

func (p *Program) closeBanCounters() error {
	err := p.closeFlowCounters()
	if p.banCounters == nil {
		return err
	}
	err = errors.Join(err, p.banCounters.Close())
	p.banCounters = nil
	return err
}

// Bans is the ban table of the program's instance (Instance.Bans): for a
// program of Load, which has an instance of its own.
func (p *Program) Bans() (*BanTable, error) { return p.in.Bans() }
