//go:build linux

package xdp_drop

import (
	"fmt"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// banRead is what an attached interface's ban counters read at one
// gather (links.readBans).
type banRead struct {
	name   string
	counts bpf.BanCounts
	err    error
}

// banReads are every attached interface's ban counters, read once a
// gather for every origin, and for a view the bans in force, which every
// interface's program shares (read from the first).
type banReads struct {
	ifaces     []banRead
	inForce    [bpf.BanOrigins]int
	inForceErr error
}

// banPoints appends the bans' point of every attached interface: the
// frames its program's bans decided, and the bans' counts.
func (s *bansSettings) banPoints(out []BanSeries, b *bans.Bans, reads banReads) []BanSeries {
	if b == nil {
		return out
	}
	if s.view {
		return s.appendViewed(out, reads)
	}
	if s.url != "" {
		out = s.appendCrowdSec(out, b.Counts(), reads.ifaces)
	}
	if b.Detecting() {
		out = appendDetection(out, b.Detection(), reads.ifaces, s.dryRun)
	}
	return out
}

// put sets s's packets and bytes to origin's under action, or its error.
func (r banRead) put(s *BanSeries, origin uint8, a bpf.BanAction) {
	if r.err != nil {
		if s.Error == "" {
			s.Error = quote.Line(firstLine(fmt.Errorf("read the ban counters: %w", r.err)))
		}
		return
	}
	s.Packets, s.Bytes = r.counts[origin][a].Packets, r.counts[origin][a].Bytes
}

// appendCrowdSec appends the CrowdSec origin's point of every interface.
func (s *bansSettings) appendCrowdSec(out []BanSeries, c bans.Counts, reads []banRead) []BanSeries {
	action, a := ActionDrop, bpf.BanDrop
	if s.dryRun {
		action, a = ActionWouldDrop, bpf.BanWouldDrop
	}
	for _, r := range reads {
		p := BanSeries{
			Interface: quote.Tag(r.name), Origin: OriginCrowdSec, Action: action,
			Active: c.Active, Added: c.Added, Removed: c.Removed, Expired: c.Expired,
			Refused: c.Refused, Synced: c.Synced, Error: c.Error,
		}
		r.put(&p, bpf.BanOriginCrowdSec, a)
		out = append(out, p)
	}
	return out
}

// appendDetection appends the detection's point of every interface. In a
// detection dry run nothing is in the table: packets and bytes are then
// the estimates (from the samples, scaled to the counters) of what passed
// from sources a ban would have held.
func appendDetection(out []BanSeries, d bans.DetectCounts, reads []banRead, bansDry bool) []BanSeries {
	action, a := ActionDrop, bpf.BanDrop
	if bansDry || d.DryRun {
		action, a = ActionWouldDrop, bpf.BanWouldDrop
	}
	for _, r := range reads {
		p := BanSeries{
			Interface: quote.Tag(r.name), Origin: OriginDetect, Action: action,
			Active: d.Active, Added: d.Added, Expired: d.Expired,
			Refused: d.Refused, Synced: d.Tick, Error: d.Error,
			Detect: true, Unreported: d.Unreported,
			AddedVerified: d.Verified, AddedUnverified: d.Unverified, BudgetSpent: d.OverBudget,
			Push: d.Push, PushOverBudget: d.PushOverBudget, Pushed: d.Pushed, PushFailed: d.PushFailed, PushDropped: d.PushDropped,
		}
		if d.DryRun {
			p.Packets, p.Bytes = d.Held[r.name].Packets, d.Held[r.name].Bytes
		} else {
			r.put(&p, bpf.BanOriginDetect, a)
		}
		out = append(out, p)
	}
	return out
}

// appendViewed appends, for a console view, the point of every viewed
// origin and interface: the frames its bans decided, and the bans in force
// read from the kernel's ban maps. What was added, lifted or synced is the
// observed instance's to count: zero here.
func (s *bansSettings) appendViewed(out []BanSeries, reads banReads) []BanSeries {
	for _, r := range reads.ifaces {
		for _, o := range s.viewed {
			action, a := ActionDrop, bpf.BanDrop
			if o.dryRun {
				action, a = ActionWouldDrop, bpf.BanWouldDrop
			}
			p := BanSeries{
				Interface: quote.Tag(r.name), Origin: o.name, Action: action,
				Active: int64(reads.inForce[o.origin]), Viewed: true,
			}
			if reads.inForceErr != nil {
				p.Error = quote.Line(firstLine(reads.inForceErr))
			}
			r.put(&p, o.origin, a)
			out = append(out, p)
		}
	}
	return out
}
