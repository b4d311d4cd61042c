//go:build linux

package xdp_drop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/topk"
)

// sampler reads the sampled frames of one attached program: it counts
// their sources into fixed tables, swapped at every gather, and writes
// them to the capture.
type sampler struct {
	prog    *bpf.Program
	reader  *bpf.SampleReader
	done    chan struct{}
	drained chan struct{}  // the reader has read up to want
	window  *detect.Window // the detection's, nil without

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

// sampleDrainWait bounds how long a gather waits for the readers to read
// what the ring held when it began: far longer than reading a full ring
// takes, so only a stalled reader leaves samples to the next gather.
const sampleDrainWait = time.Second

// tap is an interface's part of the sampling: the reader of its program's
// samples and what the top sources of its last interval were counted from.
type tap struct {
	sampler *sampler
	spare   interval // the sampler's tables of the last interval
	// base is every frame by action when the last interval the top
	// sources cover ended: what their estimates scale to is counted since.
	base [bpf.ActionCount]bpf.Counter
	// window takes the passed frames of the program for the detection.
	window *detect.Window
}

// start starts reading the samples of the interface's program prog, once
// per program, and again when its reader has stopped: the new one keeps
// what the old one read, and why it stopped, for the next gather.
// counters is the interface's block, read into for the first base.
// Without sample_rate it starts nothing.
func (s *sampling) start(t *tap, name string, prog *bpf.Program, counters *bpf.Block) error {
	if !s.on {
		return nil
	}
	old := t.sampler
	if old != nil && old.prog == prog && !old.exited() {
		return nil
	}
	s.stop(t)
	fresh := old == nil || old.prog != prog
	if fresh {
		// The first interval's estimates scale to the frames counted from
		// here: counters handed over or pinned hold earlier ones.
		if err := prog.ReadBlock(counters); err != nil {
			return err
		}
		t.base = [bpf.ActionCount]bpf.Counter{}
		addActions(&t.base, counters)
	}
	r, err := prog.SampleReader()
	if err != nil {
		return err
	}
	sm := &sampler{prog: prog, reader: r, done: make(chan struct{}), drained: make(chan struct{}, 1)}
	if fresh {
		for a := range sm.tables {
			sm.tables[a] = topk.New(TopTableSize)
		}
		t.spare = interval{}
	} else {
		sm.tables, sm.samples, sm.bytes, sm.received, sm.err = old.tables, old.samples, old.bytes, old.received, old.err
	}
	if s.detect != nil && t.window == nil {
		t.window = s.detect.Watch(name, prog)
	}
	sm.window = t.window
	t.sampler = sm
	go sm.run(name, s.capture, s.bits4, s.bits6, s.top > 0)
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

// stop stops the reader of the interface's samples, if any, and waits
// for it.
func (s *sampling) stop(t *tap) {
	if t.sampler == nil {
		return
	}
	t.sampler.reader.Close()
	<-t.sampler.done
	t.sampler = nil
	if t.window != nil {
		s.detect.Unwatch(t.window)
		t.window = nil
	}
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
		if s.window != nil && e.Action == bpf.ActionPass {
			s.detectSample(e)
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

// drain waits, until by at the latest, for the reader to have read sent
// events, those the program had put in the ring: a gather then reports
// the frames sampled before it, rather than at the reader's next poll.
func (s *sampler) drain(sent uint64, by time.Time) {
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
	timeout := time.NewTimer(time.Until(by))
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

// detectSample gives a passed sample to the detection's window: its
// source (aggregated there as the top sources are; an IPv4-mapped IPv6
// source as the IPv4 address it names, which is what a ban of it would
// hold), destination and ports, or none when it is not IP.
func (s *sampler) detectSample(e *bpf.Sample) {
	if proto, ok := e.Class.Protocol(); ok {
		if f, ok := detectFrame(e.Data); ok {
			if f.Src.Is4In6() {
				f.Src, f.Dst = f.Src.Unmap(), netip.Addr{} // no flow of one family to verify
			}
			f.Length, f.Proto = uint32(e.Len), proto
			s.window.AddFrame(f)
			return
		}
	}
	s.window.AddUnsourced(uint32(e.Len))
}
