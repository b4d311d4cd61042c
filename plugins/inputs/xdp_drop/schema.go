package xdp_drop

import (
	"strconv"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// The metric schema: measurement, tag and field names. They are a contract
// with every query, dashboard and alert built on them.
const (
	// MeasurementCounters holds one point per class with traffic, and per
	// standing class (docs/metrics.md: "Series at zero") also without.
	MeasurementCounters = "xdp_drop"
	// MeasurementLink holds one point per interface: its attachment.
	MeasurementLink = "xdp_drop_link"
	// MeasurementRule holds one point per interface and rule.
	MeasurementRule = "xdp_drop_rule"
	// MeasurementTop holds the heaviest sources of the sampled frames.
	MeasurementTop = "xdp_drop_top"
	// MeasurementBan holds one point per interface and ban origin: the
	// frames bans decided and the bans' counts.
	MeasurementBan = "xdp_drop_ban"
	// MeasurementBanEvent holds one point per ban, expiry or refusal of
	// a detection, at most maxBanEvents a gather.
	MeasurementBanEvent = "xdp_drop_ban_event"
	// MeasurementFlowSpec holds one point per FlowSpec rule in force and
	// interface, and a last one for a rule withdrawn since the gather before.
	MeasurementFlowSpec = "xdp_drop_flowspec"
	// MeasurementFlowSpecPeer holds one point per FlowSpec BGP peer.
	MeasurementFlowSpecPeer = "xdp_drop_flowspec_peer"

	TagInterface = "interface"
	TagFamily    = "family"
	TagProtocol  = "protocol"
	TagAction    = "action"
	TagRxQueue   = "rx_queue" // per_queue only
	TagCPU       = "cpu"      // per_cpu only
	TagMode      = "mode"
	TagRule      = "rule"
	TagRank      = "rank"   // xdp_drop_top: 1 is the heaviest
	TagOrigin    = "origin" // xdp_drop_ban: what fed the bans
	TagEvent     = "event"  // xdp_drop_ban_event: ban, expire or refused
	TagPeer      = "peer"   // xdp_drop_flowspec_peer: the peer's address

	FieldPackets   = "packets"
	FieldBytes     = "bytes"
	FieldAttached  = "attached"
	FieldProgramID = "program_id"
	FieldFallback  = "fallback"
	FieldError     = "error"
	FieldPrefixes  = "prefixes" // xdp_drop_rule of a rule with prefix files
	FieldLoaded    = "loaded"   // idem: unix time of the last good load in force
	FieldAdded     = "added"    // idem: prefixes the last change added
	FieldRemoved   = "removed"  // idem: and removed

	// xdp_drop_top: the source (a prefix), its estimated share of the
	// sampled frames of its action, and the protocol and rule most of its
	// frames had.
	FieldSource   = "source"
	FieldShare    = "share"
	FieldProtocol = "protocol"
	FieldRule     = "rule"

	// xdp_drop_link, with sampling: sampled frames this process read, lost
	// (the ring was full) and capped (over sample_max_per_second), counted
	// since this process loaded the program, not since attach.
	FieldSampled      = "sampled"
	FieldSampleLost   = "sample_lost"
	FieldSampleCapped = "sample_capped"
	// xdp_drop_link, with capture_path: the interface's sampled frames not
	// written to the capture since this process started, and, while it
	// fails, why (the first error since it last wrote).
	FieldCaptureLost  = "capture_lost"
	FieldCaptureError = "capture_error"

	// xdp_drop_ban: bans in force, and since start the prefixes banned
	// (added), lifted (removed), past their end (expired), decisions
	// refused (allow-listed, over max, unsupported), and the unix time of
	// the last good pull of the feed (synced; 0 before one).
	FieldActive  = "active"
	FieldExpired = "expired"
	FieldRefused = "refused"
	FieldSynced  = "synced"

	// xdp_drop_ban of origin detect: events beyond maxBanEvents a gather
	// (logged, not emitted), and with crowdsec_push the bans the LAPI
	// took, the posts that failed, and the bans given up.
	FieldUnreported  = "events_unreported"
	FieldPushed      = "pushed"
	FieldPushFailed  = "push_failed"
	FieldPushDropped = "push_dropped"
	// and the bans added by their evidence (verified: established TCP
	// connections carried it), the sources over the rate not banned as
	// max_bans_per_minute was spent, and with crowdsec_push the bans not
	// pushed as max_pushes_per_minute was.
	FieldAddedVerified   = "added_verified"
	FieldAddedUnverified = "added_unverified"
	FieldBudgetSpent     = "budget_spent"
	FieldPushOverBudget  = "push_over_budget"

	// xdp_drop_ban_event: the source's estimated rates, the ban's
	// duration in seconds and the source's offence count.
	FieldPPS            = "pps"
	FieldBytesPerSecond = "bytes_per_second"
	FieldDurationS      = "duration_s"
	FieldOffence        = "offence"
	// and a ban's evidence (verified, a boolean) and its cap in frames a
	// second (limit_pps; 0 for a drop).
	FieldVerified = "verified"
	FieldLimitPPS = "limit_pps"

	// xdp_drop_flowspec: the rule's text; of its frames, those it dropped.
	FieldRuleText       = "rule_text"
	FieldDroppedPackets = "dropped_packets"
	FieldDroppedBytes   = "dropped_bytes"
	// xdp_drop_flowspec_peer (docs/metrics.md); refused_<a FlowRefusals reason>.
	FieldState         = "state"
	FieldUp            = "up"
	FieldUptimeS       = "uptime_s"
	FieldReceived      = "received"
	FieldAccepted      = "accepted"
	FieldRefusedPrefix = "refused_"
	FieldLastUpdateS   = "last_update_s"
)

// FlowRefusals are the reasons a FlowSpec rule is refused, each a field
// of xdp_drop_flowspec_peer (refused_<reason>), present at zero too.
var FlowRefusals = []string{"only_local_destinations", "max_rules", "action", "unsupported", "malformed", "capacity"}

// Values of the action tag of xdp_drop_flowspec; accept: no traffic action.
const FlowActionDrop, FlowActionLimit, FlowActionAccept = "drop", "limit", "accept"

// Values of the event tag.
const (
	EventBan      = "ban"
	EventExpire   = "expire"
	EventRefused  = "refused"
	EventBudget   = "budget"
	EventUnpushed = "unpushed" // bans.EventUnpushed
)

// Values of the origin tag.
const (
	OriginCrowdSec = "crowdsec"
	OriginDetect   = "detect"
)

// Values of the action tag.
const (
	ActionDrop      = "drop"
	ActionPass      = "pass"
	ActionWouldDrop = "would_drop" // dry_run: what the policy would have dropped, passed
)

// Actions lists the action tag's values in the order views show them.
var Actions = []string{ActionDrop, ActionWouldDrop, ActionPass}

// Snapshot is what one gather sees: the counters of every attached
// interface and the link state of every configured one. Gather turns it
// into points; other consumers (the -watch view) read it directly.
//
// A new dimension of the counters is a field of SeriesKey and a tag in its
// PutTags; a new measurement is a slice here, of a type with PutTags and
// PutFields, and a loop in Gather.
type Snapshot struct {
	Time   time.Time    // when the counters were read: the points' time
	Series []Series     // MeasurementCounters
	Rules  []RuleSeries // MeasurementRule
	Links  []Link       // MeasurementLink
	Top    []TopSource  // MeasurementTop
	Bans   []BanSeries  // MeasurementBan
	Events []BanEvent   // MeasurementBanEvent
	// With [flowspec]: MeasurementFlowSpec, MeasurementFlowSpecPeer. FlowViewed:
	// a console view's, read from the running instance's maps; FlowPeersAt:
	// when it wrote the peers' states there (zero: none read).
	FlowSpec    []FlowSpecSeries
	FlowPeers   []FlowPeerSeries
	FlowViewed  bool
	FlowPeersAt time.Time
}

// RuleSeries is one rule's counters on one interface: the frames it
// decided (the first rule that matched them), cumulative since attach.
type RuleSeries struct {
	Interface string
	Rule      string // the rule's name
	Action    string // the rule's action, as the action tag names it
	Packets   uint64
	Bytes     uint64
	// Files says the rule has prefix files, which add what the interface's
	// program holds: Prefixes (in force), Loaded (unix time its files last
	// loaded good while it was the rule's set), Added and Removed (by the
	// change that made it; 0 before any) and, while a file fails to load or
	// the rule's changed set is not in force on the interface, Error
	// (file:line and what is wrong, or why the swap failed).
	Files    bool
	Prefixes int64
	Loaded   int64
	Added    int64
	Removed  int64
	Error    string
}

// PutTags adds the rule series' tags to tags.
func (r *RuleSeries) PutTags(tags map[string]string) {
	tags[TagInterface] = r.Interface
	tags[TagRule] = r.Rule
	tags[TagAction] = r.Action
}

// PutFields adds the rule series' fields to fields.
func (r *RuleSeries) PutFields(fields map[string]any) {
	fields[FieldPackets] = r.Packets
	fields[FieldBytes] = r.Bytes
	if !r.Files {
		return
	}
	fields[FieldPrefixes] = r.Prefixes
	fields[FieldLoaded] = r.Loaded
	fields[FieldAdded] = r.Added
	fields[FieldRemoved] = r.Removed
	if r.Error != "" {
		fields[FieldError] = r.Error
	}
}

// SeriesKey names one counter series by its tag values; it is comparable,
// so that a view can key rates by it.
type SeriesKey struct {
	Interface string // as line protocol carries it (see quote.Tag)
	Family    string // ipv4, ipv6 or l2
	Protocol  string // ClassProtocol
	Action    string // Action
	RxQueue   string // "" unless per_queue
	CPU       string // "" unless per_cpu
}

// Series is one counter series: cumulative counts since attach.
type Series struct {
	SeriesKey
	Packets uint64
	Bytes   uint64
	// ZeroAt, when set, is the time of the gather before, which read the
	// series at zero: the series is new since, and a point at zero at that
	// time lets difference-based totals count its first burst.
	ZeroAt time.Time
}

// PutTags adds the series' tags to tags.
func (k *SeriesKey) PutTags(tags map[string]string) {
	tags[TagInterface] = k.Interface
	tags[TagFamily] = k.Family
	tags[TagProtocol] = k.Protocol
	tags[TagAction] = k.Action
	if k.CPU != "" {
		tags[TagCPU] = k.CPU
	}
	if k.RxQueue != "" {
		tags[TagRxQueue] = k.RxQueue
	}
}

// PutFields adds the series' fields to fields.
func (s *Series) PutFields(fields map[string]any) {
	fields[FieldPackets] = s.Packets
	fields[FieldBytes] = s.Bytes
}

// Link is the attachment state of one interface.
type Link struct {
	Interface string
	Mode      string // as attached; the configured mode when not attached
	Attached  bool
	ProgramID int64  // when attached
	Fallback  bool   // when attached: mode = "auto" fell back to generic
	Error     string // when not attached: why, in one line ("" if unknown)
	// Observer, when attached, names whose program is read, not attached
	// here: set only when Observe is (the console view), never a field.
	Observer string
	// LinkID and Holders, when observed: the id of the BPF link that
	// attaches the program (0: attached through netlink, no link) and the
	// processes that hold it (none: kept by a pin). Never fields.
	LinkID  uint32
	Holders []Holder
	// Sampling: when attached with sample_rate set, what became of the
	// sampled frames (see FieldSampled).
	Sampling                          bool
	Sampled, SampleLost, SampleCapped uint64
	// Capture: with capture_path as well, what became of the sampled
	// frames in it (see FieldCaptureLost).
	Capture      bool
	CaptureLost  uint64
	CaptureError string
}

// Holder is a process that holds an observed program's BPF link.
type Holder struct {
	PID  int
	Comm string
}

// PutTags adds the link point's tags to tags.
func (l *Link) PutTags(tags map[string]string) {
	tags[TagInterface] = l.Interface
	tags[TagMode] = l.Mode
}

// PutFields adds the link point's fields to fields.
func (l *Link) PutFields(fields map[string]any) {
	fields[FieldAttached] = l.Attached
	switch {
	case l.Attached:
		fields[FieldProgramID] = l.ProgramID
		fields[FieldFallback] = l.Fallback
		if l.Sampling {
			fields[FieldSampled] = l.Sampled
			fields[FieldSampleLost] = l.SampleLost
			fields[FieldSampleCapped] = l.SampleCapped
		}
		if l.Sampling && l.Capture {
			fields[FieldCaptureLost] = l.CaptureLost
			if l.CaptureError != "" {
				fields[FieldCaptureError] = l.CaptureError
			}
		}
	case l.Error != "":
		fields[FieldError] = l.Error
	}
}

// ClassProtocol is the protocol tag of a class: the IANA keyword of its IP
// protocol or the decimal number, or the name of a class without one.
func ClassProtocol(c bpf.Class) string {
	if proto, ok := c.Protocol(); ok {
		return protocolTag(proto)
	}
	return c.Name()
}

// ActionTag is the action tag of frames the program gave action a: in a
// dry run, a drop is would_drop.
func ActionTag(dryRun bool, a bpf.Action) string {
	switch {
	case a == bpf.ActionPass:
		return ActionPass
	case dryRun:
		return ActionWouldDrop
	default:
		return ActionDrop
	}
}

// Action is the action tag of frames of class c under policy, rules aside.
func Action(policy bpf.Policy, c bpf.Class) string {
	switch {
	case !policy.Drops(c):
		return ActionPass
	case policy.DryRun:
		return ActionWouldDrop
	default:
		return ActionDrop
	}
}

// TopSource is one of the heaviest sources of an interface's sampled
// frames of one action over the last gather interval. The rank is the tag
// and the source a field, so the series are bounded (interfaces × actions ×
// top_sources) however many sources there are.
type TopSource struct {
	Interface string
	Action    string
	Rank      int
	Source    string  // a prefix, top_source_prefix_ipv4/ipv6 long
	Packets   uint64  // estimated: Share × the action's frames counted in the interval
	Bytes     uint64  // its share of the sampled bytes × the action's bytes counted
	Share     float64 // of the action's sampled frames
	Protocol  string  // the protocol tag of most of its frames
	Rule      string  // the rule that decided most of them; "" for none
}

// PutTags adds the top source's tags to tags.
func (s *TopSource) PutTags(tags map[string]string) {
	tags[TagInterface] = s.Interface
	tags[TagAction] = s.Action
	tags[TagRank] = strconv.Itoa(s.Rank)
}

// PutFields adds the top source's fields to fields.
func (s *TopSource) PutFields(fields map[string]any) {
	fields[FieldSource] = s.Source
	fields[FieldPackets] = s.Packets
	fields[FieldBytes] = s.Bytes
	fields[FieldShare] = s.Share
	fields[FieldProtocol] = s.Protocol
	if s.Rule != "" {
		fields[FieldRule] = s.Rule
	}
}
