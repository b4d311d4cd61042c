package xdp_drop

import (
	"time"

	"github.com/influxdata/telegraf"
)

// emitSnapshot passes the points of a snapshot to acc, at its time; a
// series new since the gather before is preceded by a point at zero at
// that gather's time (Series.ZeroAt).
func emitSnapshot(acc telegraf.Accumulator, snap *Snapshot) {
	e := newEmitter(acc, snap.Time)
	for i := range snap.Series {
		s := &snap.Series[i]
		if !s.ZeroAt.IsZero() {
			zero := Series{SeriesKey: s.SeriesKey}
			e.addAt(MeasurementCounters, &zero, s.ZeroAt)
		}
		e.add(MeasurementCounters, s)
	}
	for i := range snap.Rules {
		e.add(MeasurementRule, &snap.Rules[i])
	}
	for i := range snap.Top {
		e.add(MeasurementTop, &snap.Top[i])
	}
	for i := range snap.Bans {
		e.add(MeasurementBan, &snap.Bans[i])
	}
	for i := range snap.Events {
		e.add(MeasurementBanEvent, &snap.Events[i])
	}
	for i := range snap.FlowSpec {
		e.add(MeasurementFlowSpec, &snap.FlowSpec[i])
	}
	for i := range snap.FlowPeers {
		e.add(MeasurementFlowSpecPeer, &snap.FlowPeers[i])
	}
	// Last: a reader of the output can take them to end the gather.
	for i := range snap.Links {
		e.add(MeasurementLink, &snap.Links[i])
	}
}

// point is one point of a measurement of the snapshot.
type point interface {
	PutTags(tags map[string]string)
	PutFields(fields map[string]any)
}

// emitter passes the points of one gather to the accumulator. One tags map,
// one fields map and one timestamp serve them all: Telegraf's accumulators
// copy what they are given (metric.New, testutil.Accumulator) and keep none
// of it, so a gather allocates no map per point.
type emitter struct {
	acc    telegraf.Accumulator
	at     []time.Time
	tags   map[string]string
	fields map[string]any
}

func newEmitter(acc telegraf.Accumulator, now time.Time) *emitter {
	return &emitter{
		acc:    acc,
		at:     []time.Time{now},
		tags:   make(map[string]string, 6),
		fields: make(map[string]any, 3),
	}
}

func (e *emitter) add(measurement string, p point) {
	clear(e.tags)
	clear(e.fields)
	p.PutTags(e.tags)
	p.PutFields(e.fields)
	e.acc.AddFields(measurement, e.fields, e.tags, e.at...)
}

// addAt passes a point at time t.
func (e *emitter) addAt(measurement string, p point, t time.Time) {
	clear(e.tags)
	clear(e.fields)
	p.PutTags(e.tags)
	p.PutFields(e.fields)
	e.acc.AddFields(measurement, e.fields, e.tags, t)
}
