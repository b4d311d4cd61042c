//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// setSampling sets the sampling constants of spec and sizes its ring.
func setSampling(spec *ebpf.CollectionSpec, s Sampling) error {
	if !s.On() {
		return nil
	}
	if s.Rate > SampleRateMax {
		// The countdown re-arms within [1, 2 × rate), in 32 bits.
		return fmt.Errorf("sample rate %d: at most %d", s.Rate, SampleRateMax)
	}
	if s.MaxPerSecond == 0 || s.Snaplen == 0 || s.Snaplen > SnaplenMax {
		return fmt.Errorf("sampling needs a cap above 0 and a snap length of 1..%d, not %d and %d", SnaplenMax, s.MaxPerSecond, s.Snaplen)
	}
	interval := uint64(1e9) / uint64(s.MaxPerSecond)
	vars := []struct {
		name  string
		value any
	}{
		{xdpDropVarSampleRate, s.Rate},
		{xdpDropVarSampleActions, s.actionMask()},
		{xdpDropVarSampleInterval, interval},
		{xdpDropVarSampleTolerance, uint64(s.Burst()-1) * interval},
		{xdpDropVarSampleSnaplen, s.Snaplen},
		{xdpDropVarSampleWakeup, uint64(s.RingSize() / 4)},
	}
	for _, v := range vars {
		if err := spec.Variables[v.name].Set(v.value); err != nil {
			return fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	spec.Maps[xdpDropMapSamples].MaxEntries = s.RingSize()
	return nil
}

// Sample is one sampled frame.
type Sample struct {
	// Time is when it was sampled, on CLOCK_MONOTONIC, in nanoseconds.
	Time    uint64
	Ifindex int
	// Len is the whole frame's length; Data its first Snaplen bytes at most.
	Len   int
	Class Class
	// Action is what the frame was counted under; Dropped whether it was
	// dropped (not in a dry run).
	Action  Action
	Dropped bool
	// Rule is the index of the rule that decided it, -1 when none did.
	Rule int
	Data []byte
}

// ErrSamplerClosed is returned by SampleReader.Read once it is closed.
var ErrSamplerClosed = errors.New("sample reader closed")

// SampleReader reads the sampled frames of a program from its ring.
type SampleReader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
	s   Sample
}

// SampleReader opens a reader of the program's sampled frames. The caller
// must Close it before the program.
func (p *Program) SampleReader() (*SampleReader, error) {
	if p.samples == nil {
		return nil, errors.New("the program does not sample")
	}
	r, err := ringbuf.NewReader(p.samples.ring)
	if err != nil {
		return nil, fmt.Errorf("open the sample ring: %w", err)
	}
	return &SampleReader{r: r}, nil
}

// samplePoll is how often the reader looks at the ring unwoken: the
// program wakes it only when a quarter of the ring is waiting.
const samplePoll = 100 * time.Millisecond

// Read waits for the next sampled frame. The Sample and its Data are
// reused by the next call. After Close it returns ErrSamplerClosed.
func (r *SampleReader) Read() (*Sample, error) {
	for {
		r.r.SetDeadline(time.Now().Add(samplePoll))
		if err := r.r.ReadInto(&r.rec); err != nil {
			// Either way what the ring held has been read: wait again.
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrFlushed) {
				continue
			}
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return nil, ErrSamplerClosed
			}
			return nil, fmt.Errorf("read the sample ring: %w", err)
		}
		if decodeSample(r.rec.RawSample, &r.s) {
			return &r.s, nil
		}
	}
}

// decodeSample fills s from a raw event; false when it is too short.
func decodeSample(raw []byte, s *Sample) bool {
	if len(raw) < SampleHeaderSize {
		return false
	}
	le := binary.LittleEndian
	caplen := int(le.Uint32(raw[16:]))
	verdict := raw[22]
	*s = Sample{
		Time:    le.Uint64(raw[0:]),
		Ifindex: int(le.Uint32(raw[8:])),
		Len:     int(le.Uint32(raw[12:])),
		Class:   Class(le.Uint16(raw[20:])),
		Action:  Action(verdict & 1),
		Dropped: verdict&uint8(xdpDropVerdictVERDICT_DROP) != 0,
		Rule:    int(raw[23]) - 1,
		Data:    raw[SampleHeaderSize:][:min(caplen, len(raw)-SampleHeaderSize)],
	}
	return true
}

// Flush has a Read waiting look at the ring now, rather than at its next
// poll or wakeup, and return what it holds; safe beside a Read.
func (r *SampleReader) Flush() error { return r.r.Flush() }

// Close stops the reader; a Read waiting returns ErrSamplerClosed.
func (r *SampleReader) Close() error { return r.r.Close() }

// SampleCounts is what became of the frames picked for sampling,
// cumulative since load.
type SampleCounts struct {
	Sent   uint64 // put in the ring
	Capped uint64 // over the cap (MaxPerSecond)
	Lost   uint64 // the ring was full
}

// SampleCounts sums the sampling counters over CPUs; zero without sampling.
func (p *Program) SampleCounts() (SampleCounts, error) {
	var c SampleCounts
	if p.samples == nil {
		return c, nil
	}
	var per []xdpDropSampleState
	if err := p.samples.states.Lookup(uint32(0), &per); err != nil {
		return c, fmt.Errorf("read sample counters: %w", err)
	}
	for _, s := range per {
		c.Sent += s.Sent
		c.Capped += s.Capped
		c.Lost += s.Lost
	}
	return c, nil
}

// sampleMaps are a program's own sampling maps: each interface has its
// ring, its countdowns and its cap. They are made before the program is
// loaded and given to it, so that the variants loaded later (multi-buffer,
// a rule swap) take the same ones and the ring's reader reads on.
type sampleMaps struct {
	states, bucket, ring *ebpf.Map
}

// newSampleMaps makes the sampling maps of spec, nil without sampling.
func newSampleMaps(spec *ebpf.CollectionSpec, s Sampling) (*sampleMaps, error) {
	if !s.On() {
		return nil, nil
	}
	var m sampleMaps
	for _, x := range []struct {
		name string
		dst  **ebpf.Map
	}{{xdpDropMapSampleStates, &m.states}, {xdpDropMapSampleBuckets, &m.bucket}, {xdpDropMapSamples, &m.ring}} {
		mm, err := ebpf.NewMap(spec.Maps[x.name])
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("create map %s: %w", x.name, err)
		}
		*x.dst = mm
	}
	return &m, nil
}

// byName are the maps by their names in the ELF, for MapReplacements.
func (m *sampleMaps) byName() map[string]*ebpf.Map {
	if m == nil {
		return nil
	}
	return map[string]*ebpf.Map{xdpDropMapSampleStates: m.states, xdpDropMapSampleBuckets: m.bucket, xdpDropMapSamples: m.ring}
}

// Close closes the maps (the programs keep their own references).
func (m *sampleMaps) Close() error {
	if m == nil {
		return nil
	}
	var err error
	for _, mm := range []*ebpf.Map{m.states, m.bucket, m.ring} {
		if mm != nil {
			err = errors.Join(err, mm.Close())
		}
	}
	return err
}
