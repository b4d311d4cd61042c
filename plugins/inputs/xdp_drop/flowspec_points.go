package xdp_drop

import (
	"slices"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// FlowSpecSeries is one FlowSpec rule's point on one interface
// (MeasurementFlowSpec): the frames it matched there, cumulative since
// the rule came into force on the instance's maps, and of them those it
// dropped (a limit rule: over its rate; would have, in a dry run).
type FlowSpecSeries struct {
	Interface      string
	Rule           string // bpf.FlowRule.ID
	Action         string // FlowActionDrop, FlowActionLimit or FlowActionAccept
	Text           string // the canonical text of the rule
	Packets        uint64
	Bytes          uint64
	DroppedPackets uint64
	DroppedBytes   uint64
}

// PutTags adds the rule's tags to tags.
func (s *FlowSpecSeries) PutTags(tags map[string]string) {
	tags[TagInterface] = s.Interface
	tags[TagRule] = s.Rule
	tags[TagAction] = s.Action
}

// PutFields adds the rule's fields to fields.
func (s *FlowSpecSeries) PutFields(fields map[string]any) {
	fields[FieldRuleText] = s.Text
	fields[FieldPackets] = s.Packets
	fields[FieldBytes] = s.Bytes
	fields[FieldDroppedPackets] = s.DroppedPackets
	fields[FieldDroppedBytes] = s.DroppedBytes
}

// FlowPeerSeries is one BGP peer's point (MeasurementFlowSpecPeer).
type FlowPeerSeries struct {
	Peer        string // the address
	State       string
	Up          bool
	UptimeS     int64
	Received    int64
	Accepted    int64
	Refused     int64   // in all
	RefusedBy   []int64 // by reason, in the order of FlowRefusals
	LastUpdateS int64   // -1: no UPDATE yet
}

// PutTags adds the peer's tags to tags.
func (s *FlowPeerSeries) PutTags(tags map[string]string) {
	tags[TagPeer] = s.Peer
}

// PutFields adds the peer's fields to fields; every reason is there, at
// zero too.
func (s *FlowPeerSeries) PutFields(fields map[string]any) {
	fields[FieldState] = s.State
	fields[FieldUp] = s.Up
	fields[FieldUptimeS] = s.UptimeS
	fields[FieldReceived] = s.Received
	fields[FieldAccepted] = s.Accepted
	fields[FieldRefused] = s.Refused
	for i, reason := range FlowRefusals {
		var n int64
		if i < len(s.RefusedBy) {
			n = s.RefusedBy[i]
		}
		fields[FieldRefusedPrefix+reason] = n
	}
	fields[FieldLastUpdateS] = s.LastUpdateS
}

// flowRead is what one attached interface's FlowSpec counters read at a
// gather, by rule ID.
type flowRead struct {
	name   string
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

// points appends the point of every rule in force (in enforcement order)
// on every interface read, zero counts included, then the last point of
// each rule the interface's gather before had and that is gone. text
// gives a rule's canonical text by its ID. An interface whose counters do
// not read has no points; its error is returned for the gather's.
func (f *flowSeries) points(out []FlowSpecSeries, inForce []bpf.FlowRule, text func(*bpf.FlowRule) string, reads []flowRead) ([]FlowSpecSeries, []error) {
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
		iface := quote.Tag(r.name)
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
		var gone []string
		for id := range f.last[r.name] {
			if _, ok := now[id]; !ok {
				gone = append(gone, id)
			}
		}
		slices.Sort(gone)
		for _, id := range gone {
			s := f.last[r.name][id]
			if c, ok := r.counts[id]; ok {
				s.Packets, s.Bytes, s.DroppedPackets, s.DroppedBytes = c.Packets, c.Bytes, c.DroppedPackets, c.DroppedBytes
			}
			out = append(out, s)
		}
		next[r.name] = now
	}
	f.last = next
	return out, errs
}
