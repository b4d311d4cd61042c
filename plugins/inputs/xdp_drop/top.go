//go:build linux

package xdp_drop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/influxdata/telegraf"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/pcapng"
	"github.com/xdp-drop/xdp_drop/internal/topk"
)

// sampler reads the sampled frames of one attached program: it counts
// their sources into fixed tables, swapped at every gather, and writes
// them to the capture.
type sampler struct {
	prog    *bpf.Program
	reader  *bpf.SampleReader
	done    chan struct{}
	drained chan struct{} // the reader has read up to want

	mu       sync.Mutex
	tables   [bpf.ActionCount]*topk.Table
	samples  [bpf.ActionCount]uint64 // this interval's, sources or not
	bytes    [bpf.ActionCount]uint64 // their lengths
	received uint64                  // since the program was loaded
	want     uint64                  // received that a gather waits for; 0 for none
	err      error                   // why reading stopped
}

// interval is what a sampler saw between two gathers.
type interval struct {
	tables  [bpf.ActionCount]*topk.Table
	samples [bpf.ActionCount]uint64
	bytes   [bpf.ActionCount]uint64
}

// sampleDrainWait bounds how long a gather waits for the reader to read
// what the ring held when it began: far longer than reading a full ring
// takes, so only a stalled reader leaves samples to the next gather.
const sampleDrainWait = time.Second

// startSampler starts reading the samples of the interface's program, once
// per program, and again when its reader has stopped: the new one keeps
// what the old one read, and why it stopped, for the next gather.
func (x *XDPDrop) startSampler(ifc *iface) error {
	old := ifc.sampler
	if old != nil && old.prog == ifc.prog && !old.exited() {
		return nil
	}
	x.stopSampler(ifc)
	fresh := old == nil || old.prog != ifc.prog
	if fresh {
		// The first interval's estimates scale to the frames counted from
		// here: counters handed over or pinned hold earlier ones.
		if err := ifc.prog.ReadBlock(&ifc.counters); err != nil {
			return err
		}
		ifc.topBase = [bpf.ActionCount]bpf.Counter{}
		addActions(&ifc.topBase, &ifc.counters)
	}
	r, err := ifc.prog.SampleReader()
	if err != nil {
		return err
	}
	s := &sampler{prog: ifc.prog, reader: r, done: make(chan struct{}), drained: make(chan struct{}, 1)}
	if fresh {
		for a := range s.tables {
			s.tables[a] = topk.New(TopTableSize)
		}
		ifc.spare = interval{}
	} else {
		s.tables, s.samples, s.bytes, s.received, s.err = old.tables, old.samples, old.bytes, old.received, old.err
	}
	ifc.sampler = s
	go s.run(ifc.name, x.capture, int(x.TopSourcePrefixV4), int(x.TopSourcePrefixV6), x.TopSources > 0)
	return nil
}

// exited says the sampler's reader has stopped.
func (s *sampler) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// startSamplers starts reading the samples of every attached interface at
// once, rather than at the first gather: the ring holds a quarter of a
// second of events at the cap, a gather interval many times that.
func (x *XDPDrop) startSamplers(acc telegraf.Accumulator) {
	if !x.policy.Sample.On() {
		return
	}
	for _, ifc := range x.ifaces {
		if ifc.prog == nil || ifc.observer != "" {
			continue
		}
		if err := x.startSampler(ifc); err != nil {
			x.report(acc, ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
		}
	}
}

// stopSampler stops the reader of the interface's samples, if any, and
// waits for it.
func (x *XDPDrop) stopSampler(ifc *iface) {
	if ifc.sampler == nil {
		return
	}
	ifc.sampler.reader.Close()
	<-ifc.sampler.done
	ifc.sampler = nil
}

// monotonicOffset is what turns the kernel's CLOCK_MONOTONIC stamps into
// wall-clock time.
func monotonicOffset() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Now().UnixNano() - ts.Nano()
}

func (s *sampler) run(name string, c *capture, bits4, bits6 int, top bool) {
	defer close(s.done)
	offset := monotonicOffset()
	for {
		e, err := s.reader.Read()
		if err != nil {
			if !errors.Is(err, bpf.ErrSamplerClosed) {
				s.mu.Lock()
				s.err = fmt.Errorf("reading samples stopped, started again: %w", err)
				s.mu.Unlock()
			}
			return
		}
		if c != nil {
			c.write(name, time.Unix(0, int64(e.Time)+offset), e.Data, e.Len)
		}
		s.mu.Lock()
		s.received++
		s.samples[e.Action]++
		s.bytes[e.Action] += uint64(e.Len)
		if s.want != 0 && s.received >= s.want {
			s.want = 0
			select {
			case s.drained <- struct{}{}:
			default:
			}
		}
		if top {
			if proto, ok := e.Class.Protocol(); ok {
				if src, ok := sourceAddr(e.Data); ok {
					s.tables[e.Action].Add(topk.Aggregate(src, bits4, bits6), uint64(e.Len), proto, e.Rule)
				}
			}
		}
		s.mu.Unlock()
	}
}

// drain waits, at most sampleDrainWait, until the reader has read sent
// events, those the program had put in the ring: a gather then reports
// the frames sampled before it, rather than at the reader's next poll.
func (s *sampler) drain(sent uint64) {
	s.mu.Lock()
	if s.received >= sent {
		s.mu.Unlock()
		return
	}
	s.want = sent
	s.mu.Unlock()
	if err := s.reader.Flush(); err != nil {
		return // closed: the reader has stopped, and says why at take
	}
	timeout := time.NewTimer(sampleDrainWait)
	defer timeout.Stop()
	for {
		select {
		case <-s.drained:
		case <-s.done:
			return
		case <-timeout.C:
			return
		}
		// A signal may be left from a drain that gave up: check.
		s.mu.Lock()
		read := s.received >= sent
		s.mu.Unlock()
		if read {
			return
		}
	}
}

// take returns what was sampled since the last take, handing the tables of
// spare (emptied) to the reader in exchange, the frames received so far,
// and, once, why a reader stopped.
func (s *sampler) take(spare *interval) (received uint64, err error) {
	for a, t := range spare.tables {
		if t == nil {
			spare.tables[a] = topk.New(TopTableSize)
		} else {
			t.Reset()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables, spare.tables = spare.tables, s.tables
	s.samples, spare.samples = [bpf.ActionCount]uint64{}, s.samples
	s.bytes, spare.bytes = [bpf.ActionCount]uint64{}, s.bytes
	err, s.err = s.err, nil
	return s.received, err
}

// receivedSoFar is the frames received so far.
func (s *sampler) receivedSoFar() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

// sourceAddr is the source address of an IP frame, under up to two VLAN
// tags, from its first bytes.
func sourceAddr(b []byte) (netip.Addr, bool) {
	be := binary.BigEndian
	off := 12
	if len(b) < off+2 {
		return netip.Addr{}, false
	}
	et := be.Uint16(b[off:])
	for i := 0; i < 2 && (et == 0x8100 || et == 0x88a8); i++ {
		off += 4
		if len(b) < off+2 {
			return netip.Addr{}, false
		}
		et = be.Uint16(b[off:])
	}
	off += 2
	switch {
	case et == 0x0800 && len(b) >= off+16:
		return netip.AddrFrom4([4]byte(b[off+12 : off+16])), true
	case et == 0x86dd && len(b) >= off+24:
		return netip.AddrFrom16([16]byte(b[off+8 : off+24])), true
	}
	return netip.Addr{}, false
}

// readTop adds the heaviest sources of the interface's sampled frames since
// the last gather to snap, and the sampling counters to its link point,
// with the capture's (captureErr: what keeps it from writing). counted are
// the interface's series this gather read, nil when the read failed.
func (x *XDPDrop) readTop(acc telegraf.Accumulator, ifc *iface, snap *Snapshot, l *Link, counted []Series, captureErr string) {
	// An observed program's ring is its owner's to read: reading it here
	// would take the events away from it.
	if ifc.prog == nil || !x.policy.Sample.On() || ifc.observer != "" {
		return
	}
	if ifc.sampler == nil || ifc.sampler.prog != ifc.prog {
		return // Reconcile could not start its sampler, and reported why
	}
	counts, err := ifc.prog.SampleCounts()
	if err != nil {
		x.report(acc, ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
	} else {
		ifc.sampler.drain(counts.Sent)
	}
	l.Sampling = true
	l.SampleLost, l.SampleCapped = counts.Lost, counts.Capped
	if x.capture != nil {
		l.Capture = true
		l.CaptureLost = x.capture.lostOn(ifc.name)
		l.CaptureError = captureErr
	}
	if counted == nil {
		// Without this interval's counters nothing scales its samples:
		// they wait for the next interval, whose counters cover both.
		l.Sampled = ifc.sampler.receivedSoFar()
		return
	}
	received, err := ifc.sampler.take(&ifc.spare)
	if err != nil {
		x.report(acc, ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
	}
	l.Sampled = received
	now := x.actionTotals(counted)
	var frames [bpf.ActionCount]bpf.Counter
	for a := range frames {
		frames[a] = bpf.Counter{
			Packets: since(now[a].Packets, ifc.topBase[a].Packets),
			Bytes:   since(now[a].Bytes, ifc.topBase[a].Bytes),
		}
	}
	ifc.topBase = now
	snap.Top = x.appendTop(snap.Top, l.Interface, &ifc.spare, &frames)
}

// actionTotals sums an interface's series by action: every frame it
// counted, cumulative.
func (x *XDPDrop) actionTotals(series []Series) [bpf.ActionCount]bpf.Counter {
	var sum [bpf.ActionCount]bpf.Counter
	for i := range series {
		for a := range sum {
			if series[i].Action == ActionTag(x.policy.DryRun, bpf.Action(a)) {
				sum[a].Packets += series[i].Packets
				sum[a].Bytes += series[i].Bytes
			}
		}
	}
	return sum
}

// addActions adds the frames of every class of b to sum, by action.
func addActions(sum *[bpf.ActionCount]bpf.Counter, b *bpf.Block) {
	for i := range b.Class {
		for a, c := range b.Class[i] {
			sum[a].Packets += c.Packets
			sum[a].Bytes += c.Bytes
		}
	}
}

// since is what a cumulative counter counted after base; 0 when a read
// just before the base was taken found less.
func since(now, base uint64) uint64 {
	if now < base {
		return 0
	}
	return now - base
}

// appendTop appends the top_sources heaviest sources of each action. A
// source's estimates are its share of the action's sampled frames (bytes)
// times the frames (bytes) the action counted in the interval, exactly:
// whatever sample_rate and the cap left out, the estimates of all the
// sources of an action add up to what it counted.
func (x *XDPDrop) appendTop(top []TopSource, name string, in *interval, frames *[bpf.ActionCount]bpf.Counter) []TopSource {
	for a, t := range in.tables {
		if in.samples[a] == 0 || t == nil {
			continue
		}
		for i, e := range t.Top(int(x.TopSources)) {
			s := TopSource{
				Interface: name, Action: ActionTag(x.policy.DryRun, bpf.Action(a)), Rank: i + 1,
				Source:   e.Key.String(),
				Packets:  scale(e.Count, in.samples[a], frames[a].Packets),
				Bytes:    scale(e.Bytes, in.bytes[a], frames[a].Bytes),
				Share:    float64(e.Count) / float64(in.samples[a]),
				Protocol: protocolTag(e.Protocol),
			}
			if e.Rule >= 0 && e.Rule < len(x.policy.Rules) {
				s.Rule = x.policy.Rules[e.Rule].Name
			}
			top = append(top, s)
		}
	}
	return top
}

// scale is part/whole of total, rounded.
func scale(part, whole, total uint64) uint64 {
	if whole == 0 {
		return 0
	}
	return uint64(math.Round(float64(part) / float64(whole) * float64(total)))
}

// openCapture opens capture_path, if set. A capture that cannot be opened
// is reported and tried again at every gather; it never stops the filter.
func (x *XDPDrop) openCapture(acc telegraf.Accumulator) {
	// The console view beside a running instance must not write its capture.
	if x.CapturePath == "" || x.capture != nil || x.Observe {
		return
	}
	x.capture = newCapture(x.CapturePath, pcapng.Options{
		MaxSize: int64(x.CaptureMaxSize), Snaplen: uint32(x.CaptureSnaplen), Files: int(x.CaptureFiles),
	})
	x.checkCapture(acc)
}

// closeCapture closes capture_path once every reader has stopped.
func (x *XDPDrop) closeCapture() {
	if x.capture == nil {
		return
	}
	if err := x.capture.close(); err != nil {
		x.Log.Errorf("capture_path = %s: %v", Quote(x.CapturePath), err)
	}
	x.capture = nil
}

// checkCapture opens the capture if it is not open, reports a failure
// once, and returns the one keeping it from writing ("" when none).
func (x *XDPDrop) checkCapture(acc telegraf.Accumulator) string {
	if x.capture == nil {
		return ""
	}
	failing, report, resumed := x.capture.gathered()
	if report != nil {
		acc.AddError(fmt.Errorf("capture_path = %s: %w; the filter goes on, the sampled frames are counted in xdp_drop_link's capture_lost, and the capture is tried again every second", Quote(x.CapturePath), report))
	}
	if resumed > 0 {
		x.Log.Infof("capture_path = %s: writing again, after %d sampled frames not written", Quote(x.CapturePath), resumed)
	}
	return failing
}
