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
		Duration: e.Duration, Offence: e.Offence,
	}
	would := ""
	if d.set.DryRun {
		would = "would have "
	}
	switch e.Kind {
	case detect.Ban:
		d.counts.added++
		d.remember(e)
		d.log.Infof("bans: detect: %sbanned %s for %s (offence %d): %.0f pps, %.0f bytes/s, mostly %s, over %s for %s%s",
			would, e.Source, e.Duration, e.Offence, e.PPS, e.BytesPerSecond, d.protocol(e.Protocol), d.limits(), d.set.For, d.dryNote())
		if d.push != nil && !d.set.DryRun {
			d.push.Offer(crowdsec.Ban{
				Prefix: e.Source, Start: now, Duration: e.Duration, Evidence: d.evidence(e),
				Message: fmt.Sprintf("xdp-drop: %s sent %.0f pps, %.0f bytes/s, over %s for %s", e.Source, e.PPS, e.BytesPerSecond, d.limits(), d.set.For),
			})
		}
	case detect.Expire:
		d.counts.expired++
		d.log.Infof("bans: detect: the ban of %s %sended after %s (offence %d)", e.Source, would, e.Duration, e.Offence)
	case detect.Refused:
		d.counts.refused++
		d.log.Warnf("bans: detect: not banning %s: %s (%.0f pps, %.0f bytes/s, over %s for %s); said once per %s",
			e.Source, e.Reason, e.PPS, e.BytesPerSecond, d.limits(), d.set.For, d.set.Duration)
	}
	if len(d.events) < MaxEvents {
		d.events = append(d.events, ev)
	} else {
		d.counts.unreported++
	}
}

// evidence is what decided a ban, as its alert's event tells the LAPI.
// The rates rest on the sources of sampled frames, which a sender may
// forge: nothing verified them (no handshake was seen).
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
		{Key: "verified", Value: "false"},
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
