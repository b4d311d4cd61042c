package bpf

import (
	"math/bits"
	"unsafe"
)

// Sampling says which frames the program sends up to user space (see
// sample.h). The zero value is off: the program then has no sampling code.
type Sampling struct {
	// Rate samples 1 in Rate of the frames of the actions chosen; 0 is off.
	Rate uint32
	// Actions chooses the frames sampled by the action they are counted
	// under: a dry run's would_drop is ActionDrop.
	Actions [ActionCount]bool
	// MaxPerSecond caps the events sent up, all CPUs together.
	MaxPerSecond uint32
	// Snaplen is how many bytes of each frame are sent up, at most SnaplenMax.
	Snaplen uint32
}

// SampleRateMax is the largest sampling rate (1 in N frames): the
// program's countdown re-arms within [1, 2 × rate), in 32 bits.
const SampleRateMax = 1 << 30

// SnaplenMax bounds Sampling.Snaplen.
const SnaplenMax = uint32(xdpDropSampleLimitsSAMPLE_SNAPLEN_MAX)

// SampleHeaderSize is the size of the header of each event in the ring.
const SampleHeaderSize = int(unsafe.Sizeof(xdpDropSampleEvent{}))

// On reports whether the program samples.
func (s Sampling) On() bool { return s.Rate > 0 }

// Burst is how many events the cap lets through at once: 1/20 s of them,
// so that over any second the events stay within 5 % of MaxPerSecond.
func (s Sampling) Burst() uint32 { return max(s.MaxPerSecond/20, 1) }

// RingSize is the size of the ring buffer: a quarter of a second of events
// at the cap, a power of two between 64 KiB and 16 MiB.
func (s Sampling) RingSize() uint32 {
	const lo, hi = 64 << 10, 16 << 20
	// Each record: an 8-byte ring header, the event header, the bytes, rounded to 8.
	rec := uint64(8 + SampleHeaderSize + int(s.Snaplen+7)&^7)
	want := rec * uint64(s.MaxPerSecond) / 4
	if want <= lo {
		return lo
	}
	if want >= hi {
		return hi
	}
	return 1 << bits.Len64(want-1)
}

func (s Sampling) actionMask() uint8 {
	var m uint8
	for a, on := range s.Actions {
		if on {
			m |= 1 << a
		}
	}
	return m
}
