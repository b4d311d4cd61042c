//go:build linux

package xdp_drop

import (
	"slices"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// flowRead is what one attached interface's FlowSpec counters read at a
// gather, by rule ID.
type flowRead struct {
	name   string
	rules  []bpf.FlowRule // in force, in enforcement order
	counts map[string]bpf.FlowCount
	err    error
}

// flowSeries keeps, per interface, the rules the last gather emitted, so
// that a rule withdrawn since has one last point, then none: the series
// stay bounded by the rules in force.
type flowSeries struct {
	last map[string]map[string]FlowSpecSeries
}

// flowActionTag is the action tag of a rule: what it does with the
// frames it matches; a rule with no traffic action (sample only) accepts.
func flowActionTag(r *bpf.FlowRule) string {
	switch r.Action {
	case bpf.FlowDrop:
		return FlowActionDrop
	case bpf.FlowLimit:
		return FlowActionLimit
	}
	return FlowActionAccept
}

// points appends the point of every rule in force on an interface (in
// enforcement order) for every interface read, zero counts included, then
// the last point of each rule that is gone: one the interface's gather
// before had, with its final counts when the read returns them
// (bpf.FlowCount.Gone), and one announced and withdrawn since that
// gather, from its final counts. text
// gives a rule's canonical text by its ID. An interface whose counters do
// not read has no points; its error is returned for the gather's.
func (f *flowSeries) points(out []FlowSpecSeries, text func(*bpf.FlowRule) string, reads []flowRead) ([]FlowSpecSeries, []error) {
	var errs []error
	next := make(map[string]map[string]FlowSpecSeries, len(reads))
	for _, r := range reads {
		if r.err != nil {
			errs = append(errs, r.err)
			if prev, ok := f.last[r.name]; ok {
				next[r.name] = prev // still owed their last point
			}
			continue
		}
		iface, inForce := quote.Tag(r.name), r.rules
		now := make(map[string]FlowSpecSeries, len(inForce))
		for i := range inForce {
			rule := &inForce[i]
			c := r.counts[rule.ID]
			s := FlowSpecSeries{
				Interface: iface, Rule: quote.Tag(rule.ID), Action: flowActionTag(rule), Text: quote.Line(text(rule)),
				Packets: c.Packets, Bytes: c.Bytes, DroppedPackets: c.DroppedPackets, DroppedBytes: c.DroppedBytes,
			}
			now[rule.ID] = s
			out = append(out, s)
		}
		last := f.last[r.name]
		var gone []string
		for id := range last {
			if _, ok := now[id]; !ok {
				gone = append(gone, id)
			}
		}
		for id, c := range r.counts {
			_, in := now[id]
			_, had := last[id]
			if c.Gone != nil && !in && !had {
				gone = append(gone, id)
			}
		}
		slices.Sort(gone)
		for _, id := range gone {
			s, had := last[id]
			c, ok := r.counts[id]
			if !had {
				s = FlowSpecSeries{Interface: iface, Rule: quote.Tag(id), Action: flowActionTag(c.Gone), Text: quote.Line(text(c.Gone))}
			}
			if ok {
				s.Packets, s.Bytes, s.DroppedPackets, s.DroppedBytes = c.Packets, c.Bytes, c.DroppedPackets, c.DroppedBytes
			}
			out = append(out, s)
		}
		next[r.name] = now
	}
	f.last = next
	return out, errs
}
