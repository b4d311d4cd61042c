package xdp_drop

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
