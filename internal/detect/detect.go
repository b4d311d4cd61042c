// Package detect finds the sources whose passed frames exceed a rate for
// a while, from sampled frames scaled to exact counters, and decides their
// bans: the duration (doubled for a source banned again within the
// longest), the guards that refuse one, and when each ends. It knows
// nothing of BPF or Telegraf: the caller feeds each interface's samples
// into a Window, reads the exact passed counters once a second and calls
// Tick with them and the time; what is banned, and how, is the Enforce
// hook's business.
//
// Memory is fixed by the Config: per Window two tables of TableSize
// sources (about 200 bytes each); sources over the rate are tracked only
// from those tables (at most TableSize per Window); bans in force at most
// MaxActive; the offence history and the refusals at most MaxHistory
// each, the oldest evicted first.
package detect

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/topk"
)

// Defaults of the Config's bounds.
const (
	DefaultTableSize  = 4096
	DefaultMaxActive  = 100_000
	DefaultMaxHistory = 65_536
)

// Config is what a detection bans and for how long.
type Config struct {
	// PPS and BytesPerSecond are the rates over which a source is banned;
	// 0 is no limit; one at least is set.
	PPS, BytesPerSecond float64
	// For is how long a source must stay over the rate (whole seconds of
	// the tick; at least one).
	For time.Duration
	// Protocols are the IP protocols whose frames count; none is all.
	Protocols []uint8
	// Duration is a first ban's; MaxDuration bounds the doubling of a
	// source banned again within MaxDuration of its last ban's end.
	Duration, MaxDuration time.Duration
	// Bits4 and Bits6 aggregate sources into prefixes (top_source_prefix);
	// 0 is the whole address. A prefix is banned only for a rate spread
	// over several of its addresses: an address that carries a rate on its
	// own is banned alone.
	Bits4, Bits6 int
	// Guard names why a prefix must never be banned ("" when it may).
	Guard func(netip.Prefix) string
	// Verify says, for each TCP flow, whether the host holds an
	// established connection of it. Asked at decision time, for the
	// heaviest flows of a candidate only; nil verifies nothing.
	Verify func([]Flow) []bool
	// Unverified is what a ban on unverified evidence does (Limit, the
	// zero value, Drop or None).
	Unverified Action
	// MaxPerMinute bounds the new bans of any 60 s (0: no bound); those on
	// unverified evidence take at most its larger half, so that forged
	// sources never leave verified ones without a ban (MaxPerMinute/2 of
	// them a minute are always free for verified evidence).
	MaxPerMinute int
	// Enforce puts a ban in force until end: a drop of all the prefix's
	// frames (limit 0) or a cap of limit frames a second; a non-empty
	// answer is why it was refused. Nil enforces nothing (a dry run).
	Enforce func(p netip.Prefix, end time.Time, limit float64) string
	// TableSize, MaxActive and MaxHistory bound the memory (0: defaults).
	TableSize, MaxActive, MaxHistory int
}

// Action is what a ban does to the frames of its source.
type Action uint8

const (
	Limit Action = iota // cap them at the rate (pps, or bytes_per_second over the source's mean frame)
	Drop                // drop them all
	None                // no ban
)

var actionNames = [...]string{"limit", "drop", "none"}

// String names the action as the option does.
func (a Action) String() string { return actionNames[a] }

// ParseAction is the action of its name.
func ParseAction(s string) (Action, bool) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), true
		}
	}
	return 0, false
}

// BudgetWindow is the span over which MaxPerMinute bans are counted.
const BudgetWindow = time.Minute

// verifyFlows is how many of a candidate's heaviest flows are asked
// about, and verifyPerTick how many candidates a tick (the rest of a tick's
// candidates are unverified): at most 64 lookups a second, whatever a
// flood forges.
const (
	verifyFlows   = 4
	verifyPerTick = 16
)

const protoTCP = 6

func (c *Config) check() error {
	switch {
	case c.PPS < 0 || c.BytesPerSecond < 0:
		return errors.New("detect: a negative rate")
	case c.PPS == 0 && c.BytesPerSecond == 0:
		return errors.New("detect: no rate: set pps or bytes_per_second")
	case c.For < time.Second:
		return fmt.Errorf("detect: for = %s is under a second", c.For)
	case c.Duration <= 0 || c.MaxDuration < c.Duration:
		return fmt.Errorf("detect: duration %s and max duration %s: need 0 < duration <= max", c.Duration, c.MaxDuration)
	case c.Bits4 < 0 || c.Bits4 > 32 || c.Bits6 < 0 || c.Bits6 > 128:
		return fmt.Errorf("detect: aggregation /%d and /%d out of range", c.Bits4, c.Bits6)
	case int(c.Unverified) >= len(actionNames):
		return fmt.Errorf("detect: unverified action %d out of range", c.Unverified)
	case c.MaxPerMinute < 0:
		return errors.New("detect: a negative budget")
	}
	return nil
}

// Kind is what an Event says happened.
type Kind uint8

const (
	Ban     Kind = iota // a source banned
	Expire              // its ban ended
	Refused             // a source over the rate that a guard or Enforce refused
	Budget              // a source over the rate not banned: MaxPerMinute bans were made in the last minute
)

var kindNames = [...]string{"ban", "expire", "refused", "budget"}

// String names the kind as the event's tag does.
func (k Kind) String() string { return kindNames[k] }

// Event is one ban, expiry or refusal.
type Event struct {
	Kind   Kind
	Source netip.Prefix
	// PPS and BytesPerSecond are the source's estimated rates over the
	// last second that decided it (0 for an expiry).
	PPS, BytesPerSecond float64
	Protocol            uint8 // most of its counted frames'; 0 for an expiry
	Duration            time.Duration
	Offence             int    // the source's bans within MaxDuration, this one included; for Budget, the refusals since the budget was last spent
	Reason              string // why refused
	End                 time.Time
	// Verified says the host holds established TCP connections that
	// carried most of the source's frames (its address is proven);
	// Limit is the cap of a ban in frames a second, 0 for a drop.
	Verified bool
	Limit    float64
	// Window is the one most of its frames came through (the interface);
	// nil for an expiry.
	Window *Window
}

// Detector decides the bans; safe for concurrent use.
type Detector struct {
	cfg Config

	mu         sync.Mutex
	last       time.Time                  // the last tick; zero before the first
	tracks     map[netip.Prefix]time.Time // over the rate since
	rates      map[netip.Prefix]*rate     // this tick's estimates, reused
	active     map[netip.Prefix]*offence  // bans in force, by end
	history    map[netip.Prefix]*offence  // the last ban of each source
	refused    map[netip.Prefix]time.Time // refusals logged, until
	windows    []*Window
	spent      []spend // the newest bans, at most MaxPerMinute, oldest first
	overBudget int     // refusals by the budget since it was last spent
	verifies   int     // candidates verified this tick
	flows      []*flowTable
	cands      []netip.Prefix
	busy       map[netip.Prefix]bool // prefixes with an address over the rate this tick
}

// spend is a ban counted against the budget: when it began, and whether
// its evidence was verified.
type spend struct {
	at       time.Time
	verified bool
}

type rate struct {
	pps, bps       float64 // the estimates
	lowPPS, lowBPS float64 // their lower bounds, which decide
	proto          uint8
	top            *Window // the window of the most frames, topPK of them
	topPK          float64
	sure           float64      // its sure samples
	parent         netip.Prefix // an address's prefix when the aggregation is shorter
}

// Confidence is how many standard deviations of the sampling noise a
// source's estimate must be over the rate by: a source of a few samples a
// second at half the rate is never banned on a lucky second.
const Confidence = 3

type offence struct {
	at, end  time.Time
	duration time.Duration
	count    int
}

// New makes a detector of cfg.
func New(cfg Config) (*Detector, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.TableSize <= 0 {
		cfg.TableSize = DefaultTableSize
	}
	if cfg.MaxActive <= 0 {
		cfg.MaxActive = DefaultMaxActive
	}
	if cfg.MaxHistory <= 0 {
		cfg.MaxHistory = DefaultMaxHistory
	}
	if cfg.Bits4 == 0 {
		cfg.Bits4 = 32
	}
	if cfg.Bits6 == 0 {
		cfg.Bits6 = 128
	}
	return &Detector{
		cfg:     cfg,
		tracks:  map[netip.Prefix]time.Time{},
		rates:   map[netip.Prefix]*rate{},
		active:  map[netip.Prefix]*offence{},
		history: map[netip.Prefix]*offence{},
		refused: map[netip.Prefix]time.Time{},
		busy:    map[netip.Prefix]bool{},
	}, nil
}

// NewWindow makes a window for one interface's samples.
func (d *Detector) NewWindow() *Window {
	w := &Window{
		all: len(d.cfg.Protocols) == 0, bits4: d.cfg.Bits4, bits6: d.cfg.Bits6,
		table: topk.New(d.cfg.TableSize), spare: topk.New(d.cfg.TableSize),
		flows: newFlowTable(FlowTableSize), spareFlows: newFlowTable(FlowTableSize),
	}
	for _, p := range d.cfg.Protocols {
		w.protos[p] = true
	}
	return w
}

// Begin starts the detector's first second at now, when no tick has.
func (d *Detector) Begin(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last.IsZero() {
		d.last = now
	}
}

// Reading is a window and its interface's exact passed counters now,
// cumulative (packets and bytes).
type Reading struct {
	W              *Window
	Packets, Bytes uint64
}

// Tick ends the second at now: it scales each window's samples to the
// frames its interface passed since the last tick, bans the sources over
// the rate for For, ends the bans past their end, and returns what it did.
//
// A prefix of the aggregation is rated less what its addresses over the
// rate (or held by a ban) sent on their own: it is banned only when the
// rest, spread over several of its addresses each under the rate, is over
// it. An address over the rate is banned alone.
func (d *Detector) Tick(now time.Time, in []Reading) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var events []Event
	events = d.expire(now, events)
	elapsed := now.Sub(d.last).Seconds()
	first := d.last.IsZero()
	clear(d.rates)
	d.flows = d.flows[:0]
	d.verifies = 0
	for _, r := range in {
		t, flows, samples, bytes := r.W.take()
		dp, db := since(r.Packets, r.W.base[0]), since(r.Bytes, r.W.base[1])
		r.W.base = [2]uint64{r.Packets, r.Bytes}
		if !r.W.started || first || elapsed <= 0 || samples == 0 {
			r.W.started = true
			continue
		}
		d.flows = append(d.flows, flows)
		for _, e := range t.Top(d.cfg.TableSize) {
			sure := float64(e.Count - e.Err) // never above the source's true samples
			if sure == 0 {
				continue
			}
			// Scaled: the sources' shares of the samples times what the
			// interface passed, whatever the sampling cap left out.
			pk := sure / float64(samples) * float64(dp)
			by := 0.0
			if bytes > 0 {
				by = float64(e.Bytes) * sure / float64(e.Count) / float64(bytes) * float64(db)
			}
			d.rate(r.W, e.Key, netip.Prefix{}, e.Protocol, sure, pk, by, elapsed)
			for _, a := range e.Addrs {
				if a.Sure == 0 || e.Key.Bits() >= a.Addr.BitLen() {
					continue
				}
				// Its heaviest addresses, at their shares of the entry's own.
				f := float64(a.Sure) / sure
				d.rate(r.W, netip.PrefixFrom(a.Addr, a.Addr.BitLen()), e.Key, e.Protocol, float64(a.Sure), pk*f, by*f, elapsed)
			}
		}
	}
	// What an address sent on its own is not its prefix's spread; a
	// prefix waits while an address of it is over the rate on its own
	// (that one is banned first).
	clear(d.busy)
	for p, x := range d.rates {
		if !x.parent.IsValid() {
			continue
		}
		_, held := d.active[p]
		over := d.over(x)
		if px := d.rates[x.parent]; px != nil && (held || over) {
			px.lowPPS -= x.pps
			px.lowBPS -= x.bps
		}
		if over && !held {
			d.busy[x.parent] = true
		}
	}
	start := d.last
	d.last = now
	for p := range d.tracks {
		if x := d.rates[p]; x == nil || !d.over(x) {
			delete(d.tracks, p) // under the rate for a second: start again
		}
	}
	// The candidates, addresses before prefixes (an address banned is not
	// its prefix's to carry), the heaviest first (a forger must outsend a
	// flood to take its place in the budget), in a fixed order.
	cands := d.cands[:0]
	for p, x := range d.rates {
		if d.over(x) {
			cands = append(cands, p)
		}
	}
	slices.SortFunc(cands, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return b.Bits() - a.Bits()
		}
		if c := cmp.Compare(d.excess(d.rates[b]), d.excess(d.rates[a])); c != 0 {
			return c
		}
		return a.Addr().Compare(b.Addr())
	})
	d.cands = cands
	for _, p := range cands {
		x := d.rates[p]
		if _, ok := d.active[p]; ok {
			continue
		}
		if _, ok := d.active[x.parent]; ok && x.parent.IsValid() {
			continue // its prefix's ban holds it
		}
		if d.busy[p] {
			continue // an address of it first: tracked on
		}
		since, ok := d.tracks[p]
		if !ok {
			since = start
			d.tracks[p] = since
		}
		if now.Sub(since) < d.cfg.For {
			continue
		}
		delete(d.tracks, p)
		if ev, ok := d.decide(now, p, x); ok {
			events = append(events, ev)
		}
	}
	return events
}

// rate adds to key's rates of the second what window w saw of it: sure
// samples standing for pk frames and by bytes over elapsed seconds; an
// address key names the prefix that holds it (parent).
func (d *Detector) rate(w *Window, key, parent netip.Prefix, proto uint8, sure, pk, by, elapsed float64) {
	x := d.rates[key]
	if x == nil {
		x = &rate{proto: proto, parent: parent}
		d.rates[key] = x
	}
	if d.holds(key, x) {
		w.heldPackets += uint64(pk + 0.5)
		w.heldBytes += uint64(by + 0.5)
	}
	// low: the estimate less Confidence standard deviations of the
	// sampling noise (Poisson), so few samples never ban.
	low := max(sure-Confidence*math.Sqrt(sure), 0) / sure
	if x.top == nil || pk > x.topPK {
		x.top, x.topPK = w, pk
	}
	x.sure += sure
	x.pps += pk / elapsed
	x.bps += by / elapsed
	x.lowPPS += low * pk / elapsed
	x.lowBPS += low * by / elapsed
}

// holds says whether the frames of key k count as held by a ban: k's ban,
// or its prefix's (counted under the prefix's key alone, so none twice).
func (d *Detector) holds(k netip.Prefix, x *rate) bool {
	if _, ok := d.active[k]; !ok {
		return false
	}
	if x.parent.IsValid() {
		_, prefixHeld := d.active[x.parent]
		return !prefixHeld
	}
	return true
}

// excess is how many times over its rates x is, by the rate that is most.
func (d *Detector) excess(x *rate) float64 {
	e := 0.0
	if d.cfg.PPS > 0 {
		e = x.lowPPS / d.cfg.PPS
	}
	if d.cfg.BytesPerSecond > 0 {
		e = max(e, x.lowBPS/d.cfg.BytesPerSecond)
	}
	return e
}

func (d *Detector) over(x *rate) bool {
	return (d.cfg.PPS > 0 && x.lowPPS > d.cfg.PPS) || (d.cfg.BytesPerSecond > 0 && x.lowBPS > d.cfg.BytesPerSecond)
}

// decide bans p, over the rate for long enough, or refuses it; a refusal
// is reported once per Duration. A ban's action rests on its evidence:
// verified, a drop; else Unverified's.
func (d *Detector) decide(now time.Time, p netip.Prefix, x *rate) (Event, bool) {
	ev := Event{Source: p, PPS: x.pps, BytesPerSecond: x.bps, Protocol: x.proto, Window: x.top}
	ev.Offence, ev.Duration = 1, d.cfg.Duration
	if h := d.history[p]; h != nil && now.Sub(h.end) < d.cfg.MaxDuration {
		ev.Offence, ev.Duration = h.count+1, min(2*h.duration, d.cfg.MaxDuration)
	}
	ev.End = now.Add(ev.Duration)
	reason := ""
	if d.cfg.Guard != nil {
		reason = d.cfg.Guard(p)
	}
	if reason == "" && len(d.active) >= d.cfg.MaxActive {
		reason = fmt.Sprintf("%d bans of detection in force already", d.cfg.MaxActive)
	}
	if reason == "" && d.spentAt(now, true) {
		return d.overBudgetEvent(ev), true // no room even for verified evidence
	}
	action := Drop
	if reason == "" {
		ev.Verified = d.verified(p, x)
		if !ev.Verified && d.spentAt(now, false) {
			return d.overBudgetEvent(ev), true
		}
		if !ev.Verified {
			action = d.cfg.Unverified
		}
		switch action {
		case None:
			reason = "its evidence is not verified, and unverified sources are not banned"
		case Limit:
			ev.Limit = d.limitOf(x)
		}
	}
	if reason == "" && d.cfg.Enforce != nil {
		reason = d.cfg.Enforce(p, ev.End, ev.Limit)
	}
	if reason != "" {
		if until, ok := d.refused[p]; ok && now.Before(until) {
			return Event{}, false
		}
		if len(d.refused) >= d.cfg.MaxHistory {
			evict(d.refused, now, func(t time.Time) bool { return !now.Before(t) })
		}
		d.refused[p] = now.Add(d.cfg.Duration)
		ev.Kind, ev.Reason, ev.Offence, ev.Limit = Refused, reason, 0, 0
		return ev, true
	}
	o := &offence{at: now, end: ev.End, duration: ev.Duration, count: ev.Offence}
	d.active[p] = o
	if _, ok := d.history[p]; !ok && len(d.history) >= d.cfg.MaxHistory {
		evict(d.history, now, func(h *offence) bool { return now.Sub(h.end) >= d.cfg.MaxDuration })
	}
	d.history[p] = o
	d.spend(now, ev.Verified)
	ev.Kind = Ban
	return ev, true
}

// overBudgetEvent is ev refused by the budget: the spell's count of them.
func (d *Detector) overBudgetEvent(ev Event) Event {
	d.overBudget++
	ev.Kind, ev.Offence, ev.Limit = Budget, d.overBudget, 0
	return ev
}

// spentAt says whether the budget has no room for a ban of evidence
// verified or not: MaxPerMinute bans began within BudgetWindow of now, or,
// for unverified evidence, the larger half of it did on such evidence.
func (d *Detector) spentAt(now time.Time, verified bool) bool {
	if d.cfg.MaxPerMinute == 0 {
		return false
	}
	for len(d.spent) > 0 && now.Sub(d.spent[0].at) >= BudgetWindow {
		d.spent = d.spent[1:]
	}
	if len(d.spent) >= d.cfg.MaxPerMinute {
		return true
	}
	if verified {
		return false
	}
	n := 0
	for _, s := range d.spent {
		if !s.verified {
			n++
		}
	}
	return n >= d.cfg.MaxPerMinute-d.cfg.MaxPerMinute/2
}

// spend counts a ban begun at at against the budget: the newest
// MaxPerMinute starts are kept, in order.
func (d *Detector) spend(at time.Time, verified bool) {
	if d.cfg.MaxPerMinute == 0 {
		return
	}
	d.overBudget = 0
	i := len(d.spent)
	for i > 0 && d.spent[i-1].at.After(at) {
		i--
	}
	d.spent = slices.Insert(d.spent, i, spend{at, verified})
	if n := len(d.spent) - d.cfg.MaxPerMinute; n > 0 {
		d.spent = slices.Delete(d.spent, 0, n)
	}
}

// verified says whether p's frames of the second that came on TCP flows
// the host holds established connections of are, on their own, over the
// rate (less Confidence standard deviations, as any rate): the source
// proved its address with a handshake, and what it sent on its
// connections is the flood. Only an address is verified: a prefix of the
// aggregation holds addresses that proved nothing (its bystanders), so its
// ban is always on unverified evidence, whatever connections of some of
// its addresses carried. The heaviest verifyFlows flows of p in each
// window are asked about, for at most verifyPerTick candidates a tick.
func (d *Detector) verified(p netip.Prefix, x *rate) bool {
	if d.cfg.Verify == nil || x.sure == 0 || d.verifies >= verifyPerTick || p.Bits() < p.Addr().BitLen() {
		return false
	}
	var cands []flowCount
	for _, t := range d.flows {
		cands = t.of(p, verifyFlows, cands)
	}
	if len(cands) == 0 {
		return false
	}
	d.verifies++
	flows := make([]Flow, len(cands))
	for i, c := range cands {
		flows[i] = c.flow
	}
	ok := d.cfg.Verify(flows)
	var proven float64
	for i, c := range cands {
		if i < len(ok) && ok[i] {
			proven += float64(c.sure)
		}
	}
	if proven == 0 {
		return false
	}
	low := max(proven-Confidence*math.Sqrt(proven), 0) / x.sure
	return (d.cfg.PPS > 0 && low*x.pps > d.cfg.PPS) || (d.cfg.BytesPerSecond > 0 && low*x.bps > d.cfg.BytesPerSecond)
}

// limitOf is the cap of a limit ban of x, in frames a second: pps, or
// bytes_per_second over x's mean frame when pps is not set; 1 at least.
func (d *Detector) limitOf(x *rate) float64 {
	if d.cfg.PPS > 0 {
		return d.cfg.PPS
	}
	mean := 1.0
	if x.pps > 0 {
		mean = max(x.bps/x.pps, 1)
	}
	return max(math.Floor(d.cfg.BytesPerSecond/mean), 1)
}

// expire ends the bans past their end.
func (d *Detector) expire(now time.Time, events []Event) []Event {
	for p, o := range d.active {
		if now.Before(o.end) {
			continue
		}
		delete(d.active, p)
		events = append(events, Event{Kind: Expire, Source: p, Duration: o.duration, Offence: o.count, End: o.end})
	}
	return events
}

// evict makes room in m: it deletes the entries stale says are of no more
// use, then others, whichever they are, until an eighth of m is free.
func evict[V any](m map[netip.Prefix]V, now time.Time, stale func(V) bool) {
	n := len(m)
	for k, v := range m {
		if stale(v) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) <= n-n/8-1 {
			return
		}
		delete(m, k)
	}
}

// Restore takes back a ban in force a predecessor made (a reload): it ends
// at end and counts as offence count with its duration.
func (d *Detector) Restore(p netip.Prefix, end time.Time, duration time.Duration, count int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := &offence{at: end.Add(-duration), end: end, duration: duration, count: max(count, 1)}
	if len(d.active) < d.cfg.MaxActive {
		d.active[p] = o
	}
	d.spend(o.at, false) // a reload does not renew the budget; counted as unverified, which leaves verified evidence its share
	if len(d.history) < d.cfg.MaxHistory {
		d.history[p] = o
	}
}

// RestoreHistory takes back the last ban of a source, ended already, that
// a predecessor made (a reload): a ban of it within MaxDuration of end is
// offence count+1, twice duration long.
func (d *Detector) RestoreHistory(p netip.Prefix, end time.Time, duration time.Duration, count int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.history[p]; ok || len(d.history) >= d.cfg.MaxHistory {
		return
	}
	d.history[p] = &offence{at: end.Add(-duration), end: end, duration: duration, count: max(count, 1)}
}

// Began is when the ban in force on p began, as Restore or a ban made it.
func (d *Detector) Began(p netip.Prefix) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok := d.active[p]; ok {
		return o.at, true
	}
	return time.Time{}, false
}

// Active is how many bans of detection are in force.
func (d *Detector) Active() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.active)
}

// Sizes are the lengths of the detector's maps, for the bounds' tests.
func (d *Detector) Sizes() (tracks, active, history, refused int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.tracks), len(d.active), len(d.history), len(d.refused)
}

func since(now, base uint64) uint64 {
	if now < base {
		return 0
	}
	return now - base
}
