//go:build linux

package txgen

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Stream is traffic sent in the background until stopped: senders
// goroutines each call round over and over, and what rounds return adds up
// to Sent. The first error stops every sender and is kept, so that a test
// waiting for traffic fails at once with it rather than waiting for frames
// that will never come.
type Stream struct {
	sent    atomic.Int64
	stop    chan struct{}
	failed  chan struct{}
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
	stopped sync.Once
}

// NewStream starts senders goroutines that each run round until Stop.
// round sends (from inside the namespace: it calls ns.Do) and returns how
// many frames it sent.
func NewStream(senders int, round func() (int, error)) *Stream {
	s := &Stream{stop: make(chan struct{}), failed: make(chan struct{})}
	for range senders {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-s.stop:
					return
				case <-s.failed:
					return
				default:
				}
				n, err := round()
				s.sent.Add(int64(n))
				if err != nil {
					s.errOnce.Do(func() { s.err = err; close(s.failed) })
					return
				}
			}
		}()
	}
	return s
}

// Sent is how many frames the stream has sent so far.
func (s *Stream) Sent() int64 { return s.sent.Load() }

// WaitSent waits until the stream has sent at least n frames: it returns
// the stream's error as soon as it fails, and an error after d.
func (s *Stream) WaitSent(n int64, d time.Duration) error {
	deadline := time.After(d)
	for s.sent.Load() < n {
		select {
		case <-s.failed:
			return fmt.Errorf("the stream stopped after %d of %d frames: %w", s.sent.Load(), n, s.err)
		case <-deadline:
			return fmt.Errorf("the stream sent %d of %d frames in %v", s.sent.Load(), n, d)
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Stop stops the senders, waits for them, and returns the first error any
// of them met. It may be called more than once.
func (s *Stream) Stop() error {
	s.stopped.Do(func() { close(s.stop) })
	s.wg.Wait()
	select {
	case <-s.failed:
		return s.err
	default:
		return nil
	}
}
