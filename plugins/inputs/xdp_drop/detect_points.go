package xdp_drop

import (
	"time"

	"github.com/xdp-drop/xdp_drop/internal/bans"
)

// maxBanEvents bounds the xdp_drop_ban_event points of one gather; the
// rest are counted (FieldUnreported) and logged.
const maxBanEvents = bans.MaxEvents

// BanEvent is one ban, expiry or refusal of a detection
// (MeasurementBanEvent): the source is a field, so series stay bounded.
type BanEvent struct {
	Origin         string // OriginDetect
	Event          string // EventBan, EventExpire, EventRefused or EventBudget
	Source         string // the prefix
	PPS            float64
	BytesPerSecond float64
	DurationS      int64   // the ban's; for a refusal, the ban's it would have had
	Offence        int64   // the source's bans within max_duration, this one included; 0 for a refusal
	Verified       bool    // a ban's evidence: established TCP connections carried it
	LimitPPS       float64 // a ban's cap in frames a second; 0 for a drop
}

// PutTags adds the event's tags to tags.
func (e *BanEvent) PutTags(tags map[string]string) {
	tags[TagOrigin] = e.Origin
	tags[TagEvent] = e.Event
}

// PutFields adds the event's fields to fields.
func (e *BanEvent) PutFields(fields map[string]any) {
	fields[FieldSource] = e.Source
	fields[FieldPPS] = e.PPS
	fields[FieldBytesPerSecond] = e.BytesPerSecond
	fields[FieldDurationS] = e.DurationS
	fields[FieldOffence] = e.Offence
	if e.Event == EventBan {
		fields[FieldVerified] = e.Verified
		fields[FieldLimitPPS] = e.LimitPPS
	}
}

// banEvents appends the detection's events as points to out.
func banEvents(out []BanEvent, events []bans.Event) []BanEvent {
	for _, e := range events {
		out = append(out, BanEvent{
			Origin: OriginDetect, Event: e.Kind, Source: e.Source.String(),
			PPS: e.PPS, BytesPerSecond: e.BytesPerSecond,
			DurationS: int64(e.Duration / time.Second), Offence: int64(e.Offence),
			Verified: e.Verified, LimitPPS: e.LimitPPS,
		})
	}
	return out
}
