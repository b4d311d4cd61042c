//go:build linux

package bans

import (
	"fmt"
	"strconv"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// protocol names IP protocol n as the points do.
func (d *detection) protocol(n uint8) string {
	if d.set.ProtocolNames == nil {
		return strconv.Itoa(int(n))
	}
	return d.set.ProtocolNames[n]
}

// record counts, logs, queues the point of and shares one event.
func (d *detection) record(now time.Time, e detect.Event) {
	ev := Event{
		Kind: e.Kind.String(), Source: e.Source, PPS: e.PPS, BytesPerSecond: e.BytesPerSecond,
		Duration: e.Duration, Offence: e.Offence, Verified: e.Verified, LimitPPS: e.Limit,
	}
	would := ""
	if d.set.DryRun {
		would = "would have "
	}
	switch e.Kind {
	case detect.Ban:
		d.counts.added++
		if e.Verified {
			d.counts.verified++
		} else {
			d.counts.unverified++
		}
		d.remember(e)
		d.log.Infof("bans: detect: %sbanned %s for %s (offence %d, %s): %s: %.0f pps, %.0f bytes/s, mostly %s, over %s for %s%s",
			would, e.Source, e.Duration, e.Offence, evidenceOf(e.Verified), actionOf(e), e.PPS, e.BytesPerSecond, d.protocol(e.Protocol), d.limits(), d.set.For, d.dryNote())
		if d.push != nil && !d.set.DryRun && (e.Verified || d.set.PushUnverified) {
			d.push.Offer(crowdsec.Ban{
				Prefix: e.Source, Start: now, Duration: e.Duration, Evidence: d.evidence(e),
				Message: fmt.Sprintf("xdp-drop: %s sent %.0f pps, %.0f bytes/s, over %s for %s (%s)", e.Source, e.PPS, e.BytesPerSecond, d.limits(), d.set.For, evidenceOf(e.Verified)),
			})
		}
	case detect.Expire:
		d.counts.expired++
		d.log.Infof("bans: detect: the ban of %s %sended after %s (offence %d)", e.Source, would, e.Duration, e.Offence)
	case detect.Refused:
		d.counts.refused++
		if d.refusalLine(now) {
			d.log.Warnf("bans: detect: not banning %s: %s (%.0f pps, %.0f bytes/s, over %s for %s); said once per %s",
				e.Source, e.Reason, e.PPS, e.BytesPerSecond, d.limits(), d.set.For, d.set.Duration)
		}
	case detect.Budget:
		d.counts.overBudget++
		if e.Offence != 1 {
			return // one event and one line until the budget has room again
		}
		d.log.Warnf("bans: detect: not banning %s (%.0f pps, %.0f bytes/s): max_bans_per_minute = %d bans were made in the last minute; the bans in force stay, and no new one is made until the oldest is a minute old. "+
			"A flood from more sources than that is for a limit rule ([[inputs.xdp_drop.rule]] action = \"limit\"), which holds every source at once",
			e.Source, e.PPS, e.BytesPerSecond, budgetOr(d.set.MaxBansPerMinute))
	}
	if len(d.events) < MaxEvents {
		d.events = append(d.events, ev)
	} else {
		d.counts.unreported++
	}
}

// unpushed reports a ban the push queue gave up on (refused, ended, over
// max_pushes_per_minute): one event and one line each. It runs on the
// queue's goroutine.
func (d *detection) unpushed(b crowdsec.Ban, err error) {
	d.log.Warnf("bans: detect: the ban of %s is not shared with the LAPI: %s", b.Prefix, firstLine(err))
	d.mu.Lock()
	defer d.mu.Unlock()
	ev := Event{Kind: EventUnpushed, Source: b.Prefix, Duration: b.Duration}
	if len(d.events) < MaxEvents {
		d.events = append(d.events, ev)
	} else {
		d.counts.unreported++
	}
}

// maxRefusalLines bounds the refusals logged one by one a minute: sources
// a sender forges by the thousand are counted and are events, but fill no
// log.
const maxRefusalLines = 10

// refusalLine says whether a refusal at now gets its own log line; past
// maxRefusalLines in a minute the rest are summed in one line when the
// next minute begins. Called with d.mu held.
func (d *detection) refusalLine(now time.Time) bool {
	if now.Sub(d.refusalsSince) >= time.Minute {
		if d.refusalsHidden > 0 {
			d.log.Warnf("bans: detect: %d more sources refused in the minute from %s, not logged one by one (each is counted in refused and is an event)",
				d.refusalsHidden, d.refusalsSince.Format(time.TimeOnly))
		}
		d.refusalsSince, d.refusalsLogged, d.refusalsHidden = now, 0, 0
	}
	if d.refusalsLogged < maxRefusalLines {
		d.refusalsLogged++
		return true
	}
	d.refusalsHidden++
	return false
}

// evidenceOf names a ban's evidence as logs and alerts say it.
func evidenceOf(verified bool) string {
	if verified {
		return "verified: established TCP connections carried it"
	}
	return "unverified: its source address may be forged"
}

// actionOf says what a ban does.
func actionOf(e detect.Event) string {
	if e.Limit > 0 {
		return fmt.Sprintf("limited to %.0f frames/s", e.Limit)
	}
	return "all its frames dropped"
}

// evidence is what decided a ban, as its alert's event tells the LAPI.
// The rates rest on the sources of sampled frames, which a sender may
// forge unless verified says established connections carried them.
func (d *detection) evidence(e detect.Event) []crowdsec.Meta {
	iface := ""
	if wi := d.watched[e.Window]; wi != nil {
		iface = wi.name
	}
	return []crowdsec.Meta{
		{Key: "pps", Value: strconv.FormatFloat(e.PPS, 'f', 0, 64)},
		{Key: "bytes_per_second", Value: strconv.FormatFloat(e.BytesPerSecond, 'f', 0, 64)},
		{Key: "protocol", Value: d.protocol(e.Protocol)},
		{Key: "interface", Value: iface},
		{Key: "verified", Value: strconv.FormatBool(e.Verified)},
		{Key: "over", Value: d.limits() + " for " + d.set.For.String()},
		{Key: "host", Value: d.host},
	}
}

// limits says what a source is held against.
func (d *detection) limits() string {
	switch {
	case d.set.PPS > 0 && d.set.BPS > 0:
		return fmt.Sprintf("pps = %.0f or bytes_per_second = %.0f", d.set.PPS, d.set.BPS)
	case d.set.PPS > 0:
		return fmt.Sprintf("pps = %.0f", d.set.PPS)
	}
	return fmt.Sprintf("bytes_per_second = %.0f", d.set.BPS)
}

func (d *detection) dryNote() string {
	if d.set.DryRun {
		return " (dry run: nothing dropped, nothing pushed)"
	}
	return ""
}

// takeEvents returns the events of the interval and starts the next; a
// log line counts those beyond MaxEvents.
func (d *detection) takeEvents(out []Event) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	out = append(out, d.events...)
	d.events = d.events[:0]
	return out
}
