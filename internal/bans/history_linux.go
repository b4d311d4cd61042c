//go:build linux

package bans

import (
	"fmt"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// restore takes back what a predecessor left on table (a reload): the
// detection bans in force, and the offence history of the sources banned
// within max_duration, so that a source banned again escalates as if no
// reload had been. Called with d.mu held.
func (d *detection) restore(table *bpf.BanTable) {
	now := time.Now()
	hist, err := table.History(d.set.MaxDuration)
	if err != nil {
		d.lastError = quote.Line(firstLine(fmt.Errorf("read the ban history: %w", err)))
	}
	last := make(map[string]bpf.BanRecord, len(hist))
	for _, r := range hist {
		last[r.Prefix.String()] = r
	}
	for _, e := range table.Entries() {
		if e.Origin != bpf.BanOriginDetect || !e.End.After(now) {
			continue
		}
		r, ok := last[e.Prefix.String()]
		if !ok {
			// Not in the history: one offence at least.
			r = bpf.BanRecord{Duration: max(d.set.Duration, e.End.Sub(now)), Count: 1}
		}
		delete(last, e.Prefix.String())
		d.det.Restore(e.Prefix, e.End, r.Duration, r.Count)
	}
	for _, r := range last {
		d.det.RestoreHistory(r.Prefix, r.End, r.Duration, r.Count)
	}
	d.restorePushes(now, table)
}

// restorePushes charges the push budget with the detection bans a
// predecessor began within the last minute, every one of them as if it
// had been pushed (the kernel keeps no word of which were): a reload never
// renews the budget. Called with d.mu held, before the queue runs.
func (d *detection) restorePushes(now time.Time, table *bpf.BanTable) {
	if d.push == nil {
		return
	}
	var spent []time.Time
	for _, e := range table.Entries() {
		if e.Origin != bpf.BanOriginDetect || !e.End.After(now) {
			continue
		}
		if r, ok := d.det.Began(e.Prefix); ok && now.Sub(r) < crowdsec.BudgetWindow {
			spent = append(spent, r)
		}
	}
	if len(spent) == 0 {
		return
	}
	cfg := d.pushCfg
	cfg.Spent = spent
	if q, err := crowdsec.NewPushQueue(d.pusher, cfg); err == nil {
		d.push = q
	}
}

// remember writes a ban put in force in the table's history, which a
// reload hands over with the bans: at once, not at Stop, so that it holds
// whenever the maps are handed over. Called with d.mu held.
func (d *detection) remember(e detect.Event) {
	if d.set.DryRun || d.table == nil {
		return
	}
	r := bpf.BanRecord{Prefix: e.Source, Count: e.Offence, Duration: e.Duration, End: e.End}
	if err := d.table.Remember(r, d.set.MaxDuration); err != nil {
		d.lastError = quote.Line(firstLine(fmt.Errorf("remember the ban of %s: %w", e.Source, err)))
	}
}
