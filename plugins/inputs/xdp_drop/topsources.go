//go:build linux

package xdp_drop

import (
	"fmt"
	"math"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// topSources adds the heaviest sources of the interface's sampled frames
// since the last gather to top, and the sampling counters to its link
// point l, with the capture's. counted are the interface's series this
// gather read, nil when the read failed; unread samples are waited for
// until drainBy; errors go to report.
func (s *sampling) topSources(t *tap, prog *bpf.Program, name string, counted []Series, l *Link, top []TopSource, drainBy time.Time, report func(error)) []TopSource {
	if !s.on {
		return top
	}
	if t.sampler == nil || t.sampler.prog != prog {
		return top // Reconcile could not start its sampler, and reported why
	}
	counts, err := prog.SampleCounts()
	if err != nil {
		report(fmt.Errorf("interface %s: %w", quote.Value(name), err))
	} else {
		t.sampler.drain(counts.Sent, drainBy)
	}
	l.Sampling = true
	l.SampleLost, l.SampleCapped = counts.Lost, counts.Capped
	if s.capture != nil {
		l.Capture = true
		l.CaptureLost = s.capture.lostOn(name)
		l.CaptureError = s.captureErr
	}
	if counted == nil {
		// Without this interval's counters nothing scales its samples:
		// they wait for the next interval, whose counters cover both.
		l.Sampled = t.sampler.receivedSoFar()
		return top
	}
	received, err := t.sampler.take(&t.spare)
	if err != nil {
		report(fmt.Errorf("interface %s: %w", quote.Value(name), err))
	}
	l.Sampled = received
	now := s.actionTotals(counted)
	var frames [bpf.ActionCount]bpf.Counter
	for a := range frames {
		frames[a] = bpf.Counter{
			Packets: since(now[a].Packets, t.base[a].Packets),
			Bytes:   since(now[a].Bytes, t.base[a].Bytes),
		}
	}
	t.base = now
	return s.appendTop(top, l.Interface, &t.spare, &frames)
}

// actionTotals sums an interface's series by action: every frame it
// counted, cumulative.
func (s *sampling) actionTotals(series []Series) [bpf.ActionCount]bpf.Counter {
	var sum [bpf.ActionCount]bpf.Counter
	for i := range series {
		for a := range sum {
			if series[i].Action == ActionTag(s.dryRun, bpf.Action(a)) {
				sum[a].Packets += series[i].Packets
				sum[a].Bytes += series[i].Bytes
			}
		}
	}
	return sum
}

// addActions adds the frames of every class of b to sum, by action.
func addActions(sum *[bpf.ActionCount]bpf.Counter, b *bpf.Block) {
	for i := range b.Class {
		for a, c := range b.Class[i] {
			sum[a].Packets += c.Packets
			sum[a].Bytes += c.Bytes
		}
	}
}

// since is what a cumulative counter counted after base; 0 when a read
// just before the base was taken found less.
func since(now, base uint64) uint64 {
	if now < base {
		return 0
	}
	return now - base
}

// appendTop appends the top_sources heaviest sources of each action. A
// source's estimates are its share of the action's sampled frames (bytes)
// times the frames (bytes) the action counted in the interval, exactly:
// whatever sample_rate and the cap left out, the estimates of all the
// sources of an action add up to what it counted.
func (s *sampling) appendTop(top []TopSource, name string, in *interval, frames *[bpf.ActionCount]bpf.Counter) []TopSource {
	for a, t := range in.tables {
		if in.samples[a] == 0 || t == nil {
			continue
		}
		for i, e := range t.Top(s.top) {
			p := TopSource{
				Interface: name, Action: ActionTag(s.dryRun, bpf.Action(a)), Rank: i + 1,
				Source:   e.Key.String(),
				Packets:  scale(e.Count, in.samples[a], frames[a].Packets),
				Bytes:    scale(e.Bytes, in.bytes[a], frames[a].Bytes),
				Share:    float64(e.Count) / float64(in.samples[a]),
				Protocol: protocolTag(e.Protocol),
			}
			if e.Rule >= 0 && e.Rule < len(s.rules) {
				p.Rule = s.rules[e.Rule]
			}
			top = append(top, p)
		}
	}
	return top
}

// scale is part/whole of total, rounded.
func scale(part, whole, total uint64) uint64 {
	if whole == 0 {
		return 0
	}
	return uint64(math.Round(float64(part) / float64(whole) * float64(total)))
}
