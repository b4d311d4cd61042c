//go:build linux

package xdp_drop

import (
	"fmt"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// appendPoints appends the bans' point of every attached interface: the
// frames its program's bans decided, and the bans' counts.
func (b *bans) appendPoints(out []BanSeries, ifaces []*iface) []BanSeries {
	if b == nil {
		return out
	}
	// Every origin's counters are in one per-CPU map an interface: read once.
	read := make(map[*iface]banRead, len(ifaces))
	for _, ifc := range ifaces {
		if ifc.prog != nil {
			c, err := ifc.prog.BanCounters()
			read[ifc] = banRead{c, err}
		}
	}
	if b.set.view {
		return b.appendViewed(out, ifaces, read)
	}
	if b.set.url != "" {
		out = b.appendCrowdSec(out, ifaces, read)
	}
	if b.detect != nil {
		out = b.detect.appendPoints(out, ifaces, read, b.set.dryRun)
	}
	return out
}

// banRead is what an interface's ban counters read at one gather.
type banRead struct {
	counts bpf.BanCounts
	err    error
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
func (b *bans) appendCrowdSec(out []BanSeries, ifaces []*iface, read map[*iface]banRead) []BanSeries {
	c := b.counts()
	action, a := ActionDrop, bpf.BanDrop
	if b.set.dryRun {
		action, a = ActionWouldDrop, bpf.BanWouldDrop
	}
	for _, ifc := range ifaces {
		if ifc.prog == nil {
			continue
		}
		s := BanSeries{
			Interface: quote.Tag(ifc.name), Origin: OriginCrowdSec, Action: action,
			Active: c.Active, Added: c.Added, Removed: c.Removed, Expired: c.Expired,
			Refused: c.Refused, Synced: c.Synced, Error: c.Error,
		}
		read[ifc].put(&s, bpf.BanOriginCrowdSec, a)
		out = append(out, s)
	}
	return out
}

// appendViewed appends, for a console view, the point of every viewed
// origin and interface: the frames its bans decided, and the bans in force
// read from the kernel's ban maps, which every interface's program shares
// (read once). What was added, lifted or synced is the observed
// instance's to count: zero here.
func (b *bans) appendViewed(out []BanSeries, ifaces []*iface, read map[*iface]banRead) []BanSeries {
	var inForce [bpf.BanOrigins]int
	var inForceErr error
	readOnce := false
	for _, ifc := range ifaces {
		if ifc.prog == nil {
			continue
		}
		if !readOnce {
			inForce, inForceErr = ifc.prog.BansInForce()
			readOnce = true
		}
		for _, o := range b.set.viewed {
			action, a := ActionDrop, bpf.BanDrop
			if o.dryRun {
				action, a = ActionWouldDrop, bpf.BanWouldDrop
			}
			s := BanSeries{
				Interface: quote.Tag(ifc.name), Origin: o.name, Action: action,
				Active: int64(inForce[o.origin]), Viewed: true,
			}
			if inForceErr != nil {
				s.Error = quote.Line(firstLine(inForceErr))
			}
			read[ifc].put(&s, o.origin, a)
			out = append(out, s)
		}
	}
	return out
}
