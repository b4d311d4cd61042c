package xdp_drop

import (
	"fmt"
	"sync"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/internal/pcapng"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// captureRetry is how long after a failure the capture is not tried
// again, but at a gather: a blocked rotation or a full disk costs a few
// system calls a second, not some for every sampled frame.
const captureRetry = time.Second

// capture is the rolling pcapng file of the sampled frames, written by
// the readers of every interface. A failure never stops the filter nor the
// capture for good: the frames not written are counted per interface, the
// first error is kept (for the link points, and for the log once), and the
// capture is tried again a second later and at every gather.
type capture struct {
	path string
	opts pcapng.Options

	mu       sync.Mutex
	w        *pcapng.Writer    // nil while the file cannot be opened
	err      error             // the first failure since the capture last wrote
	reported bool              // err went to the log
	retryAt  time.Time         // while err is set, no try before this
	lost     map[string]uint64 // per interface: sampled frames not written
	lostErr  uint64            // frames not written since err
	resumed  uint64            // set when writing again: the frames lost before
}

func newCapture(path string, opts pcapng.Options) *capture {
	return &capture{path: path, opts: opts, lost: map[string]uint64{}}
}

// open opens the file if it is not open; the error is kept as a write's is.
func (c *capture) open() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.openLocked(time.Now())
}

func (c *capture) openLocked(now time.Time) error {
	if c.w != nil {
		return nil
	}
	w, err := pcapng.Open(c.path, c.opts)
	if err != nil {
		c.fail(err, now)
		return err
	}
	c.w = w
	c.recover()
	return nil
}

// fail keeps the first error since the capture last wrote.
func (c *capture) fail(err error, now time.Time) {
	if c.err == nil {
		c.err, c.reported, c.lostErr = err, false, 0
	}
	c.retryAt = now.Add(captureRetry)
}

// write adds a frame to the capture, or counts it as lost.
func (c *capture) write(iface string, ts time.Time, data []byte, origLen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.err != nil && now.Before(c.retryAt) {
		c.lose(iface)
		return
	}
	if c.openLocked(now) != nil {
		c.lose(iface)
		return
	}
	if err := c.w.WritePacket(iface, ts, data, origLen); err != nil {
		c.fail(err, now)
		c.lose(iface)
		return
	}
	c.recover()
}

// recover clears the error once the capture works again, and notes it.
func (c *capture) recover() {
	if c.err != nil {
		c.resumed, c.err = max(c.lostErr, 1), nil
	}
}

func (c *capture) lose(iface string) {
	c.lost[iface]++
	c.lostErr++
}

// gathered is the capture's part of a start or a gather: it opens the file
// if it is not open and lets the next frame try at once. It returns the
// error keeping the capture from writing ("" when none), that error if it
// has not been reported yet, and, once, the frames lost before it wrote
// again.
func (c *capture) gathered() (failing string, report error, resumed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.openLocked(now)
	c.retryAt = time.Time{}
	resumed, c.resumed = c.resumed, 0
	if c.err == nil {
		return "", nil, resumed
	}
	if !c.reported {
		c.reported = true
		report = c.err
	}
	return c.err.Error(), report, resumed
}

// lostOn is how many sampled frames of the interface were not written.
func (c *capture) lostOn(iface string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost[iface]
}

// forget drops the count of an interface gone for good: interfaces that
// come and go by a pattern must not grow the map without bound.
func (c *capture) forget(iface string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.lost, iface)
}

func (c *capture) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		return nil
	}
	err := c.w.Close()
	c.w = nil
	return err
}

// openCapture opens capture_path, if set. A capture that cannot be opened
// is reported and tried again at every gather; it never stops the filter.
func (s *sampling) openCapture(acc telegraf.Accumulator) {
	if s.capturePath == "" || s.capture != nil {
		return
	}
	s.capture = newCapture(s.capturePath, s.captureOpts)
	s.checkCapture(acc)
}

// closeCapture closes capture_path once every reader has stopped; nil
// when Init failed.
func (s *sampling) closeCapture() {
	if s == nil || s.capture == nil {
		return
	}
	if err := s.capture.close(); err != nil {
		s.log.Errorf("capture_path = %s: %v", quote.Value(s.capturePath), err)
	}
	s.capture = nil
}

// checkCapture opens the capture if it is not open, reports a failure
// once, and keeps the one keeping it from writing ("" when none) for the
// link points.
func (s *sampling) checkCapture(acc telegraf.Accumulator) {
	if s.capture == nil {
		s.captureErr = ""
		return
	}
	failing, report, resumed := s.capture.gathered()
	if report != nil {
		acc.AddError(fmt.Errorf("capture_path = %s: %w; the filter goes on, the sampled frames are counted in xdp_drop_link's capture_lost, and the capture is tried again every second", quote.Value(s.capturePath), report))
	}
	if resumed > 0 {
		s.log.Infof("capture_path = %s: writing again, after %d sampled frames not written", quote.Value(s.capturePath), resumed)
	}
	s.captureErr = quote.Line(failing)
}

// forget drops what the capture counted of an interface gone for good.
func (s *sampling) forget(name string) {
	if s.capture != nil {
		s.capture.forget(name)
	}
}
