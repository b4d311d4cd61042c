//go:build linux

package xdp_drop

import (
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// Two actions, drop and pass: appendClasses tests both at once.
var (
	_ [bpf.ActionCount - 2]struct{}
	_ [2 - bpf.ActionCount]struct{}
)

// appendClasses appends one series per class and action with traffic, and
// the standing ones (see standingClasses) also at zero; queue and cpu are
// the optional views' tags ("" when off). log notes the series and marks
// those it has not seen since the counters were attached.
func (x *XDPDrop) appendClasses(series []Series, log *seriesLog, name string, b *bpf.Block, queue, cpu string) []Series {
	standing := &x.standing
	if queue != "" || cpu != "" {
		// The split views would multiply them by CPUs and queues.
		standing = &noStanding
	}
	for i := range b.Class {
		counts := &b.Class[i]
		// Most classes never see a frame: one test skips both actions,
		// twice as fast as a loop over them.
		if counts[0].Packets|counts[1].Packets == 0 && standing[i] == 0 {
			continue
		}
		class := bpf.Class(i)
		for a, c := range counts {
			if c.Packets == 0 && standing[i]&(1<<a) == 0 {
				continue
			}
			series = append(series, Series{
				SeriesKey: SeriesKey{
					Interface: name,
					Family:    class.Family().String(),
					Protocol:  ClassProtocol(class),
					Action:    ActionTag(x.policy.DryRun, bpf.Action(a)),
					RxQueue:   queue,
					CPU:       cpu,
				},
				Packets: c.Packets,
				Bytes:   c.Bytes,
			})
			log.note(&series[len(series)-1])
		}
	}
	return series
}

// noTraffic is the block of counters that counted nothing.
var noTraffic bpf.Block

// seriesLog remembers, for the counters attached to one interface, the
// series the gathers emitted and when the last one read them all: a series
// first emitted later was at zero then, and gets a point at zero at that
// time (Series.ZeroAt), so that difference-based totals count its first
// burst. It starts empty at each attach: a series first emitted at the
// first gather after it gets no such point, nothing having read it at zero.
type seriesLog struct {
	seen map[SeriesKey]struct{}
	// at is the time of the last gather that read every counter; zero
	// when none has since attach.
	at time.Time
	// gather is the number of the last gather that read every counter.
	gather uint64
	// view is the per_queue and per_cpu split the keys were read in.
	view [2]bool
}

// note adds s to the log and, when it is new and the counters were read
// at a gather before, sets its ZeroAt to that gather's time.
func (l *seriesLog) note(s *Series) {
	if _, ok := l.seen[s.SeriesKey]; ok {
		return
	}
	if l.seen == nil {
		l.seen = make(map[SeriesKey]struct{})
	}
	l.seen[s.SeriesKey] = struct{}{}
	s.ZeroAt = l.at
}

// read records that gather read every counter.
func (l *seriesLog) read(gather uint64) { l.gather = gather }

// readIn reports whether gather has read every counter already.
func (l *seriesLog) readIn(gather uint64) bool { return gather != 0 && l.gather == gather }

// stamp sets the time of gather, once it is known, if it read every counter.
func (l *seriesLog) stamp(gather uint64, at time.Time) {
	if l.readIn(gather) {
		l.at = at
	}
}

// attached starts the log for counters attached in gather: anew, unless
// the program they replace was read in the same gather, whose points
// stand at that gather's time (a zero there would overwrite them); the
// new counters are then read at the next gather.
func (l *seriesLog) attached(gather uint64) {
	if !l.readIn(gather) {
		l.reset()
	}
}

// viewed starts the log anew when the view (per_queue, per_cpu) changed
// since the last read: its keys are others.
func (l *seriesLog) viewed(view [2]bool) {
	if l.view != view {
		l.reset()
		l.view = view
	}
}

func (l *seriesLog) reset() {
	clear(l.seen)
	l.at = time.Time{}
	l.gather = 0
}
