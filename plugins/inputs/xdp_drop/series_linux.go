//go:build linux

package xdp_drop

import (
	"fmt"
	"strconv"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
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
func (l *links) appendClasses(series []Series, log *seriesLog, name string, b *bpf.Block, queue, cpu string) []Series {
	standing := &l.standing
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
					Action:    ActionTag(l.policy.DryRun, bpf.Action(a)),
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

// readSeries adds the series of an attached interface to snap; false when
// it is not attached or its counters could not be read.
func (l *links) readSeries(acc telegraf.Accumulator, ifc *iface, snap *Snapshot) bool {
	if ifc.prog == nil {
		return false
	}
	return l.readSeriesFrom(acc, ifc, snap, func(f bpf.BlockFunc) error { return l.readCounters(ifc, f) })
}

// readSeriesFrom adds the series of the counters read reads to snap; false
// when they were not read in this gather.
func (l *links) readSeriesFrom(acc telegraf.Accumulator, ifc *iface, snap *Snapshot, read func(bpf.BlockFunc) error) bool {
	if ifc.series.readIn(l.gathers) {
		// Attached in place of a program read in this gather: its points
		// stand for this gather; the new counters are read at the next.
		return false
	}
	name := quote.Tag(ifc.name)
	ifc.series.viewed([2]bool{*l.opts.perQueue, *l.opts.perCPU})
	// Every block with traffic is passed once: their rule counters add up.
	var rules, limited [bpf.MaxRules]bpf.Counter
	traffic := false
	err := read(func(queue, cpu int, b *bpf.Block) {
		traffic = true
		snap.Series = l.appendClasses(snap.Series, &ifc.series, name, b, queueTag(queue), cpuTag(cpu))
		for i := range l.policy.Rules {
			rules[i].Packets += b.Rule[i].Packets
			rules[i].Bytes += b.Rule[i].Bytes
			limited[i].Packets += b.Limited[i].Packets
			limited[i].Bytes += b.Limited[i].Bytes
		}
	})
	if err != nil {
		l.report(acc, ifc, fmt.Errorf("interface %s: %w", quote.Value(ifc.name), err))
		return false
	}
	if !traffic && !*l.opts.perQueue && !*l.opts.perCPU {
		// No block with traffic was passed: the standing series stand at zero.
		snap.Series = l.appendClasses(snap.Series, &ifc.series, name, &noTraffic, "", "")
	}
	ifc.series.read(l.gathers)
	gen := ifc.rulesGen
	if ifc.observer != "" {
		gen = l.files.gen // another instance's: never swapped here
	}
	snap.Rules = l.appendRules(snap.Rules, name, gen, ifc.swapErr, &rules, &limited)
	return true
}

// appendRules appends one series per rule, also for rules that never
// matched: the frames each rule decided. A limit rule has two, the frames
// it passed within budget and those it dropped over it (limited). A rule
// with prefix files reports the set the interface's program holds, of
// generation gen (swapErr: why it is not the policy's).
func (l *links) appendRules(series []RuleSeries, name string, gen uint64, swapErr error, rules, limited *[bpf.MaxRules]bpf.Counter) []RuleSeries {
	for i, r := range l.policy.Rules {
		if r.Limit != nil {
			series = appendLimitRule(series, name, r.Name, l.policy.DryRun, rules[i], limited[i])
			files := l.files.Fields(i, gen, swapErr)
			for j := len(series) - 2; j < len(series); j++ {
				files.put(&series[j])
			}
			continue
		}
		action := bpf.ActionPass
		if r.Drop {
			action = bpf.ActionDrop
		}
		s := RuleSeries{
			Interface: name, Rule: r.Name, Action: ActionTag(l.policy.DryRun, action),
			Packets: rules[i].Packets, Bytes: rules[i].Bytes,
		}
		l.files.Fields(i, gen, swapErr).put(&s)
		series = append(series, s)
	}
	return series
}

// readCounters reads the counters of an attached interface split as the
// optional views (per_queue, per_cpu) ask.
func (l *links) readCounters(ifc *iface, f bpf.BlockFunc) error {
	switch {
	case *l.opts.perQueue && *l.opts.perCPU:
		return ifc.prog.ReadPerQueueCPU(&ifc.counters, f)
	case *l.opts.perQueue:
		return ifc.prog.ReadPerQueue(&ifc.counters, f)
	case *l.opts.perCPU:
		return ifc.prog.ReadPerCPU(f)
	}
	return ifc.prog.ReadSum(&ifc.counters, f)
}

func cpuTag(cpu int) string {
	if cpu < 0 {
		return ""
	}
	return strconv.Itoa(cpu)
}

// queueTag names an RX queue; the last block holds every queue past it.
func queueTag(queue int) string {
	switch {
	case queue < 0:
		return ""
	case queue == bpf.QueueSlots-1:
		return "overflow"
	}
	return strconv.Itoa(queue)
}
