//go:build linux

package xdp_drop

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// detectTick is the detector's clock: sources are rated every second,
// whatever the gather interval.
const detectTick = time.Second

// pushQueue bounds the bans waiting for the LAPI (about 200 bytes each).
const pushQueue = 1000

// detection owns [bans.detect]: the detector, fed by each interface's
// sampled passed frames (watch) and rated every second against the
// interfaces' exact passed counters; the guards; the bans it puts on the
// ban table under the detect origin (or, in a dry run, only counts); the
// events of the last interval; the queue of bans shared with the LAPI.
type detection struct {
	set    *detectSettings
	log    telegraf.Logger
	det    *detect.Detector
	guards *guards
	push   *crowdsec.PushQueue // nil without crowdsec_push
	// roomBack is told, outside mu, when the sweep removed bans: room in
	// the table for what the feed had refused; nil tells no one.
	roomBack func()
	host     string // the host's name, in what is pushed

	mu        sync.Mutex
	watched   map[*detect.Window]*watchedIface
	table     *bpf.BanTable
	counts    detectCounts
	events    []BanEvent // of this interval, at most maxBanEvents
	cancel    context.CancelFunc
	done      chan struct{}
	started   bool
	restored  bool
	lastError string
}

// watchedIface is one interface's window and its passed counters.
type watchedIface struct {
	name string
	c    passedCounter
}

type detectCounts struct {
	added, expired, refused, unreported int64
	tick                                int64 // unix time of the last tick
}

// newDetection makes the detection owner of set; bs are the bans'
// settings (max, allow list, the LAPI).
func newDetection(set *detectSettings, bs *bansSettings, ns namespace, log telegraf.Logger) (*detection, error) {
	d := &detection{set: set, log: log, watched: map[*detect.Window]*watchedIface{}}
	d.host, _ = os.Hostname()
	allow, err := bs.allow.union()
	if err != nil {
		return nil, optionError(keyAllowPrefix, err)
	}
	d.guards = newGuards(ns, allow, bs.url)
	det, err := detect.New(detect.Config{
		PPS: set.pps, BytesPerSecond: set.bps, For: set.forDur, Protocols: set.protocols,
		Duration: set.duration, MaxDuration: set.maxDuration,
		Guard: d.guards.check, Enforce: d.enforce, MaxActive: 2 * bs.max, MaxHistory: bpf.BanHistoryMax,
	})
	if err != nil {
		return nil, optionError(keyDetect, fmt.Errorf("bans.detect: %w", err))
	}
	d.det = det
	if set.push {
		p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: bs.url, Login: set.login, Password: set.password, TLS: bs.tls, UserAgent: bs.userAgent()})
		if err != nil {
			return nil, optionError(keyDetectPush, fmt.Errorf("bans.detect.crowdsec_push: %w", err))
		}
		d.push = crowdsec.NewPushQueue(p, pushQueue, time.Second, 5*time.Minute)
	}
	return d, nil
}

// watch makes the window of an interface's sampled passed frames.
func (d *detection) watch(name string, c passedCounter) *detect.Window {
	w := d.det.NewWindow()
	d.mu.Lock()
	defer d.mu.Unlock()
	if packets, bytes, err := c.passed(); err == nil {
		w.Begin(packets, bytes) // rated from the first tick on
	}
	d.watched[w] = &watchedIface{name: name, c: c}
	return w
}

// unwatch forgets a window: once it returns, its counters are not read.
func (d *detection) unwatch(w *detect.Window) {
	d.mu.Lock()
	delete(d.watched, w)
	d.mu.Unlock()
}

// use bans on table from now on and starts the detector the first time;
// the detection bans a predecessor left in force are taken back.
func (d *detection) use(table *bpf.BanTable) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.table = table
	if !d.restored && table != nil {
		d.restored = true
		d.restore(table)
	}
	if d.started {
		return
	}
	d.started = true
	d.det.Begin(time.Now())
	d.guards.refresh(d.log)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan struct{})
	go d.run(ctx)
	if d.push != nil {
		go d.push.Run(ctx)
	}
}

// stop ends the detector; its bans stay in the table until their end.
func (d *detection) stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.cancel = nil
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (d *detection) run(ctx context.Context) {
	defer close(d.done)
	t := time.NewTicker(detectTick)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d.tick(time.Now()) > 0 && d.roomBack != nil {
			d.roomBack()
		}
		if n%60 == 0 {
			d.guards.refresh(d.log) // addresses and routes change
		}
	}
}

// tick rates the sources of the second that ended at now, and sweeps
// detection's bans past their end from the table (those alone: the other
// origins' claims on the same prefixes stay); it returns how many went.
func (d *detection) tick(now time.Time) (swept int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	readings := make([]detect.Reading, 0, len(d.watched))
	for w, wi := range d.watched {
		packets, bytes, err := wi.c.passed()
		if err != nil {
			continue // released meanwhile: unwatched at once
		}
		readings = append(readings, detect.Reading{W: w, Packets: packets, Bytes: bytes})
	}
	for _, e := range d.det.Tick(now, readings) {
		d.record(now, e)
	}
	d.counts.tick = now.Unix()
	if d.table != nil && !d.set.dryRun {
		n, err := d.table.Expire(now, bpf.BanOriginDetect)
		if err != nil {
			d.lastError = quote.Line(firstLine(fmt.Errorf("sweep the expired bans: %w", err)))
		}
		swept = n
	}
	return swept
}

// enforce puts a detection's ban on the table (not in a dry run); a
// non-empty answer is why the table refused it.
func (d *detection) enforce(p netip.Prefix, end time.Time) string {
	if d.set.dryRun {
		return ""
	}
	if d.table == nil {
		return "no ban table loaded yet"
	}
	got, err := d.table.Ban(p, end, bpf.BanOriginDetect)
	switch {
	case err != nil:
		return "the ban table failed: " + firstLine(err)
	case got == bpf.BanRefusedAllowed:
		return "allow_prefix"
	case got == bpf.BanRefusedFull:
		return "bans.max bans of its family are in force"
	}
	return ""
}

// record counts, logs, queues the point of and shares one event.
func (d *detection) record(now time.Time, e detect.Event) {
	ev := BanEvent{
		Origin: OriginDetect, Event: e.Kind.String(), Source: e.Source.String(),
		PPS: e.PPS, BytesPerSecond: e.BytesPerSecond,
		DurationS: int64(e.Duration / time.Second), Offence: int64(e.Offence),
	}
	would := ""
	if d.set.dryRun {
		would = "would have "
	}
	switch e.Kind {
	case detect.Ban:
		d.counts.added++
		d.remember(e)
		d.log.Infof("bans: detect: %sbanned %s for %s (offence %d): %.0f pps, %.0f bytes/s, mostly %s, over %s for %s%s",
			would, e.Source, e.Duration, e.Offence, e.PPS, e.BytesPerSecond, protocolTag(e.Protocol), d.limits(), d.set.forDur, d.dryNote())
		if d.push != nil && !d.set.dryRun {
			d.push.Offer(crowdsec.Ban{
				Prefix: e.Source, Start: now, Duration: e.Duration, Evidence: d.evidence(e),
				Message: fmt.Sprintf("xdp-drop: %s sent %.0f pps, %.0f bytes/s, over %s for %s", e.Source, e.PPS, e.BytesPerSecond, d.limits(), d.set.forDur),
			})
		}
	case detect.Expire:
		d.counts.expired++
		d.log.Infof("bans: detect: the ban of %s %sended after %s (offence %d)", e.Source, would, e.Duration, e.Offence)
	case detect.Refused:
		d.counts.refused++
		d.log.Warnf("bans: detect: not banning %s: %s (%.0f pps, %.0f bytes/s, over %s for %s); said once per %s",
			e.Source, e.Reason, e.PPS, e.BytesPerSecond, d.limits(), d.set.forDur, d.set.duration)
	}
	if len(d.events) < maxBanEvents {
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
		{Key: "protocol", Value: protocolTag(e.Protocol)},
		{Key: "interface", Value: iface},
		{Key: "verified", Value: "false"},
		{Key: "over", Value: d.limits() + " for " + d.set.forDur.String()},
		{Key: "host", Value: d.host},
	}
}

// limits says what a source is held against.
func (d *detection) limits() string {
	switch {
	case d.set.pps > 0 && d.set.bps > 0:
		return fmt.Sprintf("pps = %.0f or bytes_per_second = %.0f", d.set.pps, d.set.bps)
	case d.set.pps > 0:
		return fmt.Sprintf("pps = %.0f", d.set.pps)
	}
	return fmt.Sprintf("bytes_per_second = %.0f", d.set.bps)
}

func (d *detection) dryNote() string {
	if d.set.dryRun {
		return " (bans.detect.dry_run: nothing dropped)"
	}
	return ""
}

// takeEvents returns the events of the interval and starts the next; a
// log line counts those beyond maxBanEvents.
func (d *detection) takeEvents(out []BanEvent) []BanEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	out = append(out, d.events...)
	d.events = d.events[:0]
	return out
}

// appendPoints appends detection's xdp_drop_ban point of every attached
// interface. In a detection dry run nothing is in the table: packets and
// bytes are then the estimates (from the samples, scaled to the
// counters) of what passed from sources a ban would have held.
func (d *detection) appendPoints(out []BanSeries, ifaces []*iface, read map[*iface]banRead, bansDry bool) []BanSeries {
	d.mu.Lock()
	defer d.mu.Unlock()
	held := map[string][2]uint64{}
	for w, wi := range d.watched {
		p, b := w.Held()
		held[wi.name] = [2]uint64{p, b}
	}
	action, a := ActionDrop, bpf.BanDrop
	if bansDry || d.set.dryRun {
		action, a = ActionWouldDrop, bpf.BanWouldDrop
	}
	var s BanSeries
	for _, ifc := range ifaces {
		if ifc.prog == nil {
			continue
		}
		s = BanSeries{
			Interface: quote.Tag(ifc.name), Origin: OriginDetect, Action: action,
			Active: int64(d.det.Active()), Added: d.counts.added, Expired: d.counts.expired,
			Refused: d.counts.refused, Synced: d.counts.tick, Error: d.lastError,
			Detect: true, Unreported: d.counts.unreported,
		}
		if d.push != nil {
			ps := d.push.Stats()
			s.Push, s.Pushed, s.PushFailed, s.PushDropped = true, ps.Pushed, ps.Failed, ps.Dropped
			if ps.Error != "" && s.Error == "" {
				s.Error = quote.Line(firstLine(fmt.Errorf("crowdsec push: %s", ps.Error)))
			}
		}
		switch {
		case d.set.dryRun:
			s.Packets, s.Bytes = held[ifc.name][0], held[ifc.name][1]
		default:
			read[ifc].put(&s, bpf.BanOriginDetect, a)
		}
		out = append(out, s)
	}
	return out
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
	var sum [bpf.ActionCount]bpf.Counter
	addActions(&sum, &p.block)
	return sum[bpf.ActionPass].Packets, sum[bpf.ActionPass].Bytes, nil
}
