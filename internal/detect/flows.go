package detect

import (
	"net/netip"
	"sort"
)

// Flow is one direction of a TCP flow as a received frame shows it: the
// remote source and the local destination.
type Flow struct {
	Src, Dst netip.AddrPort
}

// Frame is one sampled passed frame as the detector sees it: its source
// and destination, their ports (TCP and UDP; 0 otherwise), length and IP
// protocol.
type Frame struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16
	Length       uint32
	Proto        uint8
}

// FlowTableSize is how many TCP flows a window tells apart a second: the
// heaviest are kept whatever the number of flows (Space-Saving again).
const FlowTableSize = 1024

// flowTable is a Space-Saving summary of TCP flows, the heaviest kept: a
// flow's count is never below its true count, and Err is how much of it
// may belong to flows it replaced. Not safe for concurrent use.
type flowTable struct {
	heap []*flowEntry // a min-heap by count
	pos  map[Flow]int
}

type flowEntry struct {
	flow       Flow
	count, err uint64
}

func newFlowTable(capacity int) *flowTable {
	return &flowTable{heap: make([]*flowEntry, 0, capacity), pos: make(map[Flow]int, capacity)}
}

func (t *flowTable) add(f Flow) {
	if i, ok := t.pos[f]; ok {
		t.heap[i].count++
		t.down(i)
		return
	}
	if len(t.heap) < cap(t.heap) {
		t.heap = append(t.heap, &flowEntry{flow: f, count: 1})
		t.pos[f] = len(t.heap) - 1
		t.up(len(t.heap) - 1)
		return
	}
	e := t.heap[0]
	delete(t.pos, e.flow)
	*e = flowEntry{flow: f, count: e.count + 1, err: e.count}
	t.pos[f] = 0
	t.down(0)
}

func (t *flowTable) reset() {
	clear(t.pos)
	t.heap = t.heap[:0]
}

// of lists the flows from sources in p with their sure counts (count less
// err), heaviest first, at most n.
func (t *flowTable) of(p netip.Prefix, n int, out []flowCount) []flowCount {
	start := len(out)
	for _, e := range t.heap {
		if sure := e.count - e.err; sure > 0 && p.Contains(e.flow.Src.Addr()) {
			out = append(out, flowCount{e.flow, sure})
		}
	}
	mine := out[start:]
	sort.Slice(mine, func(i, j int) bool { return mine[i].sure > mine[j].sure })
	return out[:start+min(n, len(mine))]
}

type flowCount struct {
	flow Flow
	sure uint64
}

func (t *flowTable) less(i, j int) bool { return t.heap[i].count < t.heap[j].count }

func (t *flowTable) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.pos[t.heap[i].flow] = i
	t.pos[t.heap[j].flow] = j
}

func (t *flowTable) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *flowTable) down(i int) {
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
