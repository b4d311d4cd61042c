// Package topk finds the heaviest keys of a stream in fixed memory with
// Space-Saving (Metwally, Agrawal, El Abbadi 2005): a table of capacity
// entries, where a key not in a full table takes the place of the lightest
// entry and inherits its count. A key's count is never below its true
// count and exceeds it by at most total/capacity, however many distinct
// keys the stream holds.
package topk

import (
	"net/netip"
	"sort"
)

// Entry is one key's estimate.
type Entry struct {
	Key netip.Prefix
	// Count and Bytes are its weight; Err is how much of Count may belong
	// to keys it replaced (the count it inherited).
	Count, Bytes, Err uint64
	// Protocol and Rule are the ones most of its frames had: exact when
	// its frames had at most tallySlots different ones, and always the
	// most common when that one had more than 1/tallySlots of them.
	Protocol uint8
	Rule     int
	// Addrs are the heaviest addresses of the key's frames counted with
	// AddFrom since the key took its entry, each with a count of its
	// frames never above the true one (exact when the key's frames came
	// from at most tallySlots addresses); a zero count is an empty slot.
	Addrs [tallySlots]AddrCount
}

// AddrCount is an address of a key and its sure count.
type AddrCount struct {
	Addr netip.Addr
	Sure uint64
}

type entry struct {
	Entry
	protos tally[uint8]
	rules  tally[int]
	addrs  addrTally
}

// addrTally is Space-Saving over tallySlots addresses, with each slot's
// inherited count, so that a slot's sure count is never above the truth.
type addrTally struct {
	vals   [tallySlots]netip.Addr
	counts [tallySlots]uint64
	errs   [tallySlots]uint64
}

func (t *addrTally) add(a netip.Addr) {
	lightest := 0
	for i := range t.vals {
		if t.counts[i] > 0 && t.vals[i] == a {
			t.counts[i]++
			return
		}
		if t.counts[i] < t.counts[lightest] {
			lightest = i
		}
	}
	t.vals[lightest], t.errs[lightest] = a, t.counts[lightest]
	t.counts[lightest]++
}

// sure puts each slot's address and sure count in out.
func (t *addrTally) sure(out *[tallySlots]AddrCount) {
	for i := range t.vals {
		out[i] = AddrCount{t.vals[i], t.counts[i] - t.errs[i]}
	}
}

// tallySlots is how many distinct values an entry counts apart.
const tallySlots = 4

// tally finds the most common value in fixed memory: Space-Saving again,
// over tallySlots slots.
type tally[T comparable] struct {
	vals   [tallySlots]T
	counts [tallySlots]uint64
}

func (t *tally[T]) add(v T) {
	lightest := 0
	for i := range t.vals {
		if t.counts[i] > 0 && t.vals[i] == v {
			t.counts[i]++
			return
		}
		if t.counts[i] < t.counts[lightest] {
			lightest = i
		}
	}
	t.vals[lightest] = v
	t.counts[lightest]++
}

// most is the value counted most (the first slot's on a tie).
func (t *tally[T]) most() T {
	best := 0
	for i := range t.vals {
		if t.counts[i] > t.counts[best] {
			best = i
		}
	}
	return t.vals[best]
}

func (e *entry) count(proto uint8, rule int) {
	e.protos.add(proto)
	e.rules.add(rule)
	e.Protocol, e.Rule = e.protos.most(), e.rules.most()
}

// Table is a Space-Saving summary. It is not safe for concurrent use.
type Table struct {
	heap  []*entry // a min-heap by count
	pos   map[netip.Prefix]int
	total uint64
}

// New returns a table of at most capacity keys.
func New(capacity int) *Table {
	capacity = max(capacity, 1)
	return &Table{heap: make([]*entry, 0, capacity), pos: make(map[netip.Prefix]int, capacity)}
}

// Total is the number of Adds since the last Reset.
func (t *Table) Total() uint64 { return t.total }

// Add counts one frame of key with its length, protocol and rule.
func (t *Table) Add(key netip.Prefix, bytes uint64, proto uint8, rule int) {
	t.add(key, bytes, proto, rule)
}

// add is Add, giving the key's entry (valid until the next add).
func (t *Table) add(key netip.Prefix, bytes uint64, proto uint8, rule int) *entry {
	t.total++
	if i, ok := t.pos[key]; ok {
		e := t.heap[i]
		e.Count++
		e.Bytes += bytes
		e.count(proto, rule)
		t.down(i)
		return e
	}
	if len(t.heap) < cap(t.heap) {
		e := &entry{Entry: Entry{Key: key, Count: 1, Bytes: bytes}}
		e.count(proto, rule)
		t.heap = append(t.heap, e)
		t.pos[key] = len(t.heap) - 1
		t.up(len(t.heap) - 1)
		return e
	}
	// Replace the lightest: the newcomer may have been it all along.
	e := t.heap[0]
	delete(t.pos, e.Key)
	*e = entry{Entry: Entry{Key: key, Count: e.Count + 1, Bytes: e.Bytes + bytes, Err: e.Count}}
	e.count(proto, rule)
	t.pos[key] = 0
	t.down(0)
	return e
}

// AddFrom counts one frame of key from addr, an address of key, as Add
// does; the entry also tells its heaviest addresses.
func (t *Table) AddFrom(key netip.Prefix, addr netip.Addr, bytes uint64, proto uint8, rule int) {
	e := t.add(key, bytes, proto, rule)
	e.addrs.add(addr)
	e.addrs.sure(&e.Addrs)
}

// Top returns the n heaviest entries, heaviest first (ties by key).
func (t *Table) Top(n int) []Entry {
	all := make([]Entry, len(t.heap))
	for i, e := range t.heap {
		all[i] = e.Entry
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Count != all[j].Count {
			return all[i].Count > all[j].Count
		}
		if c := all[i].Key.Addr().Compare(all[j].Key.Addr()); c != 0 {
			return c < 0
		}
		return all[i].Key.Bits() < all[j].Key.Bits()
	})
	return all[:min(n, len(all))]
}

// Reset empties the table, keeping its memory.
func (t *Table) Reset() {
	clear(t.pos)
	t.heap = t.heap[:0]
	t.total = 0
}

func (t *Table) less(i, j int) bool { return t.heap[i].Count < t.heap[j].Count }

func (t *Table) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.pos[t.heap[i].Key] = i
	t.pos[t.heap[j].Key] = j
}

func (t *Table) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *Table) down(i int) {
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.less(r, l) {
			m = r
		}
		if !t.less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// Aggregate is the prefix of addr that a source is reported as: its first
// bits4 bits for IPv4, bits6 for IPv6. An IPv4-mapped IPv6 address stays
// IPv6: anyone can send IPv6 frames from ::ffff:a.b.c.d, and blaming the
// IPv4 network a.b.c.0 for them would have a rule drop the wrong senders.
func Aggregate(addr netip.Addr, bits4, bits6 int) netip.Prefix {
	bits := bits6
	if addr.Is4() {
		bits = bits4
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return netip.PrefixFrom(addr, addr.BitLen())
	}
	return p
}
