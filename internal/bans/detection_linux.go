//go:build linux

package bans

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/sockdiag"
)

// detectTick is the detector's clock: sources are rated every second,
// whatever the gather interval.
const detectTick = time.Second

// pushQueue bounds the bans waiting for the LAPI (about 200 bytes each).
const pushQueue = 1000

// detection owns the detection: the detector, fed by each interface's
// sampled passed frames (watch) and rated every second against the
// interfaces' exact passed counters; the guards; the bans it puts on the
// ban table under the detect origin (or, in a dry run, only counts); the
// events of the last interval; the queue of bans shared with the LAPI.
type detection struct {
	set    *DetectSettings
	log    Logger
	det    *detect.Detector
	guards *guards
	push   *crowdsec.PushQueue // nil without crowdsec_push
	// pusher and pushCfg make push again when a predecessor's pushes of
	// the last minute are known (restore), before it runs.
	pusher  *crowdsec.Pusher
	pushCfg crowdsec.PushQueueConfig
	// roomBack is told, outside mu, when the sweep removed bans: room in
	// the table for what the feed had refused; nil tells no one.
	roomBack func()
	host     string // the host's name, in what is pushed
	ns       string // the network namespace whose sockets verify evidence

	mu        sync.Mutex
	watched   map[*detect.Window]*watchedIface
	table     *bpf.BanTable
	counts    detectCounts
	events    []Event // of this interval, at most MaxEvents
	cancel    context.CancelFunc
	done      chan struct{}
	started   bool
	restored  bool
	lastError string
	// The refusals logged in the minute from refusalsSince, and those not.
	refusalsSince                  time.Time
	refusalsLogged, refusalsHidden int
}

// watchedIface is one interface's window and its passed counters.
type watchedIface struct {
	name string
	c    passed
}

type detectCounts struct {
	added, expired, refused, unreported int64
	verified, unverified                int64 // bans added, by their evidence
	overBudget                          int64 // sources not banned: the budget of the minute was spent
	tick                                int64 // unix time of the last tick
}

// newDetection makes the detection owner of bs.Detect; bs are the bans'
// settings (max, allowed prefixes, the LAPI).
func newDetection(bs *Settings, log Logger) (*detection, error) {
	set := bs.Detect
	if bs.DryRun && !set.DryRun {
		dry := *set // the bans' dry run is the detection's: nothing banned, nothing pushed
		dry.DryRun = true
		set = &dry
	}
	d := &detection{set: set, log: log, watched: map[*detect.Window]*watchedIface{}}
	d.host, _ = os.Hostname()
	d.guards = newGuards(bs)
	d.ns = bs.Namespace
	det, err := detect.New(detect.Config{
		PPS: set.PPS, BytesPerSecond: set.BPS, For: set.For, Protocols: set.Protocols,
		Duration: set.Duration, MaxDuration: set.MaxDuration, Bits4: set.Bits4, Bits6: set.Bits6,
		Guard: d.guards.check, Verify: d.verify, Unverified: set.Unverified, MaxPerMinute: budgetOr(set.MaxBansPerMinute),
		Enforce: d.enforce, MaxActive: 2 * bs.Max, MaxHistory: bpf.BanHistoryMax,
	})
	if err != nil {
		return nil, &SettingError{SettingDetect, err}
	}
	d.det = det
	if set.Push {
		p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: bs.LAPI, Login: set.Login, Password: set.Password, TLS: bs.TLS, UserAgent: bs.UserAgent})
		if err != nil {
			return nil, &SettingError{SettingPush, err}
		}
		d.pusher = p
		d.pushCfg = crowdsec.PushQueueConfig{
			Size: pushQueue, MinRetry: time.Second, MaxRetry: 5 * time.Minute,
			PerMinute: budgetOr(set.MaxPushesPerMinute), OnGiveUp: d.unpushed,
		}
		if d.push, err = crowdsec.NewPushQueue(p, d.pushCfg); err != nil {
			return nil, &SettingError{SettingPush, err}
		}
	}
	return d, nil
}

// watch makes the window of an interface's sampled passed frames.
func (d *detection) watch(name string, c passed) *detect.Window {
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
	if d.table != nil && !d.set.DryRun {
		n, err := d.table.Expire(now, bpf.BanOriginDetect)
		if err != nil {
			d.lastError = quote.Line(firstLine(fmt.Errorf("sweep the expired bans: %w", err)))
		}
		swept = n
	}
	return swept
}

// enforce puts a detection's ban on the table (not in a dry run): a drop,
// or a limit of limit frames a second; a non-empty answer is why the
// table refused it.
func (d *detection) enforce(p netip.Prefix, end time.Time, limit float64) string {
	if d.set.DryRun {
		return ""
	}
	if d.table == nil {
		return "no ban table loaded yet"
	}
	var got bpf.BanOutcome
	var err error
	if limit > 0 {
		got, err = d.table.Limit(p, end, bpf.BanOriginDetect, uint64(min(limit, bpf.MaxBanLimitPPS)))
	} else {
		got, err = d.table.Ban(p, end, bpf.BanOriginDetect)
	}
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

// verify asks the kernel's socket table of the plugin's namespace which
// flows are of established TCP connections; a failure verifies nothing
// (the evidence stays unverified) and is reported.
func (d *detection) verify(flows []detect.Flow) []bool {
	in := make([]sockdiag.Flow, len(flows))
	for i, f := range flows {
		in[i] = sockdiag.Flow{Src: f.Src, Dst: f.Dst}
	}
	ok, err := sockdiag.Established(d.ns, in)
	if err != nil {
		d.lastError = quote.Line(firstLine(fmt.Errorf("verify the evidence with the socket table: %w", err)))
		return nil
	}
	return ok
}
