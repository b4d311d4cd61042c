package crowdsec

import (
	"net/netip"
	"time"
)

// Decision is one LAPI decision the client can enforce: scope Ip or Range,
// a type among Config.Types, a value that parses as an address or prefix.
type Decision struct {
	// ID is the LAPI's decision id.
	ID int64
	// Origin is who made the decision: "crowdsec", "cscli", "CAPI", "lists"...
	Origin string
	// Type is the remedy, lower case: "ban", "captcha"...
	Type string
	// Scope is the LAPI's scope text as sent ("Ip", "Range").
	Scope string
	// Value is the LAPI's value text as sent.
	Value string
	// Scenario is what made the decision (a scenario name or a cscli note).
	Scenario string
	// Prefix is the value as a masked prefix: an Ip is a /32 or /128 (or,
	// when its value is a prefix, as cscli decisions import gives every row
	// of a list scope Ip, that range), a Range its prefix; IPv4-mapped IPv6
	// is unmapped to IPv4.
	Prefix netip.Prefix
	// Duration is the time left when the LAPI answered; deleted decisions
	// may carry a negative one (already expired).
	Duration time.Duration
}

// Reason says why a decision in an answer was not returned.
type Reason string

// The reasons a decision is ignored.
const (
	// IgnoredScope: a scope other than Ip or Range (Country, AS, ...).
	IgnoredScope Reason = "unsupported_scope"
	// IgnoredType: a type not in Config.Types (captcha, throttle, ...).
	IgnoredType Reason = "type_not_enforced"
	// IgnoredValue: a value that is neither an address nor a prefix (Ip),
	// or not a prefix (Range).
	IgnoredValue Reason = "malformed_value"
	// IgnoredDuration: a duration that does not parse as a Go duration.
	IgnoredDuration Reason = "malformed_duration"
	// IgnoredMalformed: a decision that is not a JSON object of the
	// expected fields (a string where a number belongs, ...).
	IgnoredMalformed Reason = "malformed_decision"
)

// Delta is one answer of the stream.
type Delta struct {
	// Startup is true when this answer is a full list (startup=true): the
	// caller replaces its bans with New rather than adding to them.
	Startup bool
	// New are the decisions to enforce, in the LAPI's order.
	New []Decision
	// Deleted are the decisions to lift, in the LAPI's order; none in a
	// startup answer, whose New replaces them all.
	Deleted []Decision
	// Ignored counts, by reason, the decisions of New and Deleted that were
	// not returned.
	Ignored map[Reason]int
}
