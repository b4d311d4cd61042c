package detect

import (
	"net/netip"
	"sync"

	"github.com/xdp-drop/xdp_drop/internal/topk"
)

// Window is one interface's sampled passed frames of the second under way:
// the sources of those of the protocols that count, in a fixed Space-Saving
// table, and every sample's count and bytes (the whole of which the exact
// counters stand for). The sampler's reader adds; the detector's tick takes
// it whole and starts the next second.
type Window struct {
	all          bool      // no protocol filter
	protos       [256]bool // the protocols that count
	bits4, bits6 int       // the aggregation of sources into prefixes

	mu         sync.Mutex
	table      *topk.Table
	spare      *topk.Table
	flows      *flowTable // the TCP flows of the second, for the verification
	spareFlows *flowTable
	samples    uint64 // every passed sample this second, of any protocol
	bytes      uint64

	// Of the detector's goroutine alone.
	base    [2]uint64 // passed packets and bytes when the last second ended
	started bool
	// heldPackets and heldBytes estimate the frames that passed from
	// sources a detection holds banned (would_drop in a dry run).
	heldPackets, heldBytes uint64
}

// Add counts one sampled passed frame of a source known by its prefix src
// alone (no address, no flow), of length bytes and IP protocol proto: src
// is what it is banned as.
func (w *Window) Add(src netip.Prefix, length uint32, proto uint8) {
	w.mu.Lock()
	w.samples++
	w.bytes += uint64(length)
	if w.all || w.protos[proto] {
		w.table.Add(src, uint64(length), proto, -1)
	}
	w.mu.Unlock()
}

// AddFrame counts one sampled passed frame under its source's prefix (the
// aggregation), whose entry keeps its heaviest address, so that the
// detector tells an address that carries a rate from a rate spread over
// the prefix; a TCP frame's flow is counted for the verification.
func (w *Window) AddFrame(f Frame) {
	w.mu.Lock()
	w.samples++
	w.bytes += uint64(f.Length)
	if w.all || w.protos[f.Proto] {
		w.table.AddFrom(topk.Aggregate(f.Src, w.bits4, w.bits6), f.Src, uint64(f.Length), f.Proto, -1)
		if f.Proto == protoTCP && f.Dst.IsValid() {
			w.flows.add(Flow{netip.AddrPortFrom(f.Src, f.SPort), netip.AddrPortFrom(f.Dst, f.DPort)})
		}
	}
	w.mu.Unlock()
}

// AddUnsourced counts a passed sample with no source (not IP): it is part
// of the whole the counters stand for.
func (w *Window) AddUnsourced(length uint32) {
	w.mu.Lock()
	w.samples++
	w.bytes += uint64(length)
	w.mu.Unlock()
}

// Held is what the window's interface passed, as estimated from its
// samples, from sources a detection held banned: cumulative packets and
// bytes. Read it from the goroutine that ticks.
func (w *Window) Held() (packets, bytes uint64) { return w.heldPackets, w.heldBytes }

// Begin starts the window's first second at its interface's passed
// counters now, so the first tick rates it (the tick's goroutine only).
func (w *Window) Begin(packets, bytes uint64) {
	w.base = [2]uint64{packets, bytes}
	w.started = true
}

// take returns the second's tables and totals and starts the next one
// with the spare table.
func (w *Window) take() (t *topk.Table, flows *flowTable, samples, bytes uint64) {
	w.spare.Reset()
	w.spareFlows.reset()
	w.mu.Lock()
	t, w.table, w.spare = w.table, w.spare, w.table
	flows, w.flows, w.spareFlows = w.flows, w.spareFlows, w.flows
	samples, bytes = w.samples, w.bytes
	w.samples, w.bytes = 0, 0
	w.mu.Unlock()
	return t, flows, samples, bytes
}
