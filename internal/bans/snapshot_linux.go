//go:build linux

package bans

import (
	"fmt"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// DetectCounts are the detection's counts now, for its points.
type DetectCounts struct {
	DryRun                  bool  // the detection bans nothing: Held is what it would have held
	Active                  int64 // sources banned now
	Added, Expired, Refused int64
	Verified, Unverified    int64 // bans added, by their evidence
	OverBudget              int64 // sources over the rate not banned: max_bans_per_minute bans were made in the last minute
	Tick                    int64 // unix time of the last tick
	Unreported              int64 // events beyond MaxEvents an interval
	Error                   string
	Push                    bool // bans are shared with the LAPI
	Pushed, PushFailed      int64
	PushDropped             int64
	PushOverBudget          int64           // bans not pushed: max_pushes_per_minute were in the last minute
	Held                    map[string]Held // by interface: what passed from sources a ban would hold
}

// Held are the frames an interface passed from sources a ban would have
// held: estimates, from the samples scaled to the counters.
type Held struct{ Packets, Bytes uint64 }

// snapshot reads the detection's counts.
func (d *detection) snapshot() DetectCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := DetectCounts{
		DryRun: d.set.DryRun, Active: int64(d.det.Active()),
		Added: d.counts.added, Expired: d.counts.expired, Refused: d.counts.refused,
		Verified: d.counts.verified, Unverified: d.counts.unverified, OverBudget: d.counts.overBudget,
		Tick: d.counts.tick, Unreported: d.counts.unreported, Error: d.lastError,
		Held: make(map[string]Held, len(d.watched)),
	}
	for w, wi := range d.watched {
		p, b := w.Held()
		c.Held[wi.name] = Held{p, b}
	}
	if d.push != nil {
		ps := d.push.Stats()
		c.Push, c.Pushed, c.PushFailed, c.PushDropped = true, ps.Pushed, ps.Failed, ps.Dropped
		c.PushOverBudget = ps.OverBudget
		if ps.Error != "" && c.Error == "" {
			c.Error = quote.Line(firstLine(fmt.Errorf("crowdsec push: %s", ps.Error)))
		}
	}
	return c
}

// passed reads the frames an interface's program passed, cumulative.
type passed interface {
	passed() (packets, bytes uint64, err error)
}

// progPassed reads the frames a program passed, cumulative.
type progPassed struct {
	prog  *bpf.Program
	block bpf.Block
}

func (p *progPassed) passed() (packets, bytes uint64, err error) {
	if err := p.prog.ReadBlock(&p.block); err != nil {
		return 0, 0, err
	}
	for i := range p.block.Class {
		c := p.block.Class[i][bpf.ActionPass]
		packets += c.Packets
		bytes += c.Bytes
	}
	return packets, bytes, nil
}
