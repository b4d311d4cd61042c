package bans

import (
	"net/netip"
	"time"
)

// MaxEvents bounds the events of one interval; the rest are counted
// (DetectCounts.Unreported).
const MaxEvents = 100

// EventUnpushed is the kind of an event of a ban the LAPI was not given:
// refused, ended before it was taken, or over max_pushes_per_minute.
const EventUnpushed = "unpushed"

// Event is one ban, expiry or refusal of the detection.
type Event struct {
	Kind           string // detect.Kind's ("ban", "expire", "refused", "budget") or EventUnpushed
	Source         netip.Prefix
	PPS            float64
	BytesPerSecond float64
	Duration       time.Duration // the ban's; for a refusal, the ban's it would have had
	Offence        int           // the source's bans within max_duration, this one included; 0 for a refusal; for "budget", 1
	// Verified says established TCP connections carried the source's
	// frames (a ban's evidence); LimitPPS is a ban's cap, 0 for a drop.
	Verified bool
	LimitPPS float64
}
