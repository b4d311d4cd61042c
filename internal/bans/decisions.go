package bans

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
)

// Decisions holds the decisions in force by id and their prefixes: a
// prefix several decisions cover is banned until the latest of their
// ends, and lifted when the last of them goes. The LAPI's stream keeps one
// decision per scope, value and type (its key), and names a key's
// decision, new or deleted, by the id of any decision of it: a decision
// holds its key's place, and a deletion lifts its key. Ends are unix nanoseconds:
// a ban here costs about 170 bytes, whatever the LAPI sends.
type Decisions struct {
	origin    uint8 // the claims on the table are this origin's
	decisions map[int64]banDecision
	prefixes  map[netip.Prefix]bannedPrefix
	counts    Counts
	// warn logs a decision refused as the table cannot take it, once per
	// prefix (warned); nil logs nothing.
	warn   func(format string, args ...any)
	warned map[netip.Prefix]bool
	// limit bounds the decisions held (0: none); the feed sets twice max,
	// both families full, so memory stays within the max bound.
	limit int
	// refusedByTable: since the last full list, a decision was refused as
	// allow-listed or over max; freed: a ban left the table since. Both
	// make a full pull due, which retries the refused decisions.
	refusedByTable, freed bool
	// inTable is, during a full list's apply, the prefixes in the table:
	// a prefix held but missing there (lifted by an allowed prefix since
	// removed) is banned again.
	inTable map[netip.Prefix]bool
}

// RetryDue: decisions were refused by the table and room came back since.
func (s *Decisions) RetryDue() bool {
	return s.refusedByTable && s.freed
}

type banDecision struct {
	prefix netip.Prefix
	end    int64
	key    uint64 // decisionKey
}

// maxDecisionsPerPrefix bounds the decisions that hold one prefix: the
// LAPI sends one decision per value and type, so a prefix holds one or a
// few; the bound keeps each decision's work at most this many steps.
const maxDecisionsPerPrefix = 64

// bannedPrefix is a prefix in the table: its end there, and the decisions
// that hold it (most often one, at most maxDecisionsPerPrefix).
type bannedPrefix struct {
	end int64
	ids []int64
}

// NewDecisions makes the decisions of a feed whose bans are origin's
// claims, holding at most limit decisions (0: no bound); warn logs a
// decision refused as the table cannot take it, once per prefix (nil:
// nothing).
func NewDecisions(origin uint8, limit int, warn func(format string, args ...any)) *Decisions {
	return &Decisions{
		origin:    origin,
		limit:     limit,
		warn:      warn,
		decisions: map[int64]banDecision{},
		prefixes:  map[netip.Prefix]bannedPrefix{},
		warned:    map[netip.Prefix]bool{},
	}
}

// MaxDuration caps a decision's duration: CrowdSec's own bans last
// hours, a year is beyond any of them, and it keeps the end far from the
// overflow of unix nanoseconds (year 2262) that a duration such as
// 2500000h reaches. A decision still in the LAPI after a year is banned
// again at the next full pull (a restart or a feed failure).
const MaxDuration = 365 * 24 * time.Hour

// WholeFamily: p covers all of IPv4 or IPv6, which the table refuses:
// such a ban would drop every source, the operator's own access too.
func WholeFamily(p netip.Prefix) bool {
	return p.Bits() == 0 || p.Addr().Is4In6() && p.Bits() <= 96
}

// refuse counts a decision the table cannot take and logs it once per prefix.
func (s *Decisions) refuse(dec crowdsec.Decision, why string) {
	s.counts.Refused++
	if s.warn != nil && !s.warned[dec.Prefix] {
		s.warned[dec.Prefix] = true
		s.warn("bans: crowdsec: decision %d on %s refused: %s", dec.ID, dec.Prefix, why)
	}
}

// Apply puts a delta of the feed in force in table, at now. A full list
// (startup) replaces the decisions held: what it lacks is lifted, also
// bans in table that this state never saw (a predecessor's).
func (s *Decisions) Apply(table Table, d crowdsec.Delta, now time.Time) error {
	if table == nil {
		return errNoBanTable
	}
	var errs []error
	for _, n := range d.Ignored {
		s.counts.Refused += int64(n)
	}
	if d.Startup {
		s.refusedByTable, s.freed = false, false
		in, err := inForce(table, s.origin)
		if err != nil {
			return fmt.Errorf("list the bans in force: %w", err)
		}
		s.inTable = make(map[netip.Prefix]bool, len(in))
		for _, p := range in {
			s.inTable[p] = true
		}
		defer func() { s.inTable = nil }()
		// Kept by key: a key the list holds under another id than the one
		// held keeps its ban, which the list's decision then takes over.
		keep := make(map[uint64]bool, len(d.New))
		for _, dec := range d.New {
			keep[decisionKey(dec)] = true
		}
		for id, held := range s.decisions {
			if !keep[held.key] {
				errs = append(errs, s.drop(table, id, now))
			}
		}
	}
	for _, dec := range d.Deleted {
		errs = append(errs, s.lift(table, dec, now))
	}
	for _, dec := range d.New {
		errs = append(errs, s.add(table, dec, now))
	}
	if d.Startup {
		errs = append(errs, s.liftStrangers(table))
	}
	return errors.Join(errs...)
}

// add bans a decision's prefix until its end, or later when another
// decision holds it longer.
func (s *Decisions) add(table Table, dec crowdsec.Decision, now time.Time) error {
	if dec.Duration <= 0 {
		return nil // over already
	}
	if WholeFamily(dec.Prefix) {
		s.refuse(dec, "it covers a whole address family, and would drop every source")
		return nil
	}
	end := now.Add(min(dec.Duration, MaxDuration)).UnixNano()
	key := decisionKey(dec)
	s.supersede(dec, key)
	old, known := s.decisions[dec.ID]
	if !known && s.limit > 0 && len(s.decisions) >= s.limit {
		s.counts.Refused++ // the decisions held are at their bound
		return nil
	}
	if (!known || old.prefix != dec.Prefix) && len(s.prefixes[dec.Prefix].ids) >= maxDecisionsPerPrefix {
		s.counts.Refused++ // the prefix is banned by those it holds
		return nil
	}
	if known && old.prefix != dec.Prefix {
		if err := s.drop(table, dec.ID, now); err != nil {
			return err
		}
	}
	bp, held := s.prefixes[dec.Prefix]
	want := end
	for _, id := range bp.ids {
		if id != dec.ID {
			want = max(want, s.decisions[id].end)
		}
	}
	if held && want == bp.end && (s.inTable == nil || s.inTable[dec.Prefix]) {
		s.hold(dec, key, end, bp)
		return nil
	}
	got, err := table.Ban(dec.Prefix, time.Unix(0, want), s.origin)
	if err != nil {
		if !time.Unix(0, want).After(time.Now()) {
			// Ended while the apply ran (now is its start): over, as one that came ended.
			return nil
		}
		return fmt.Errorf("ban %s: %w", dec.Prefix, err)
	}
	if got.Refused() {
		s.counts.Refused++
		s.refusedByTable = true
		return nil
	}
	if got == bpf.BanAdded {
		s.counts.Added++
	}
	bp.end = want
	s.hold(dec, key, end, bp)
	return nil
}

// hold records that dec (of key) holds its prefix, in the table until bp.end.
func (s *Decisions) hold(dec crowdsec.Decision, key uint64, end int64, bp bannedPrefix) {
	if _, again := s.decisions[dec.ID]; !again {
		bp.ids = append(bp.ids, dec.ID)
	}
	s.decisions[dec.ID] = banDecision{prefix: dec.Prefix, end: end, key: key}
	s.prefixes[dec.Prefix] = bp
}

// endSlack is how close to its end a decision that goes counts as
// expired: the LAPI lists a decision past its end as deleted, as it does
// one deleted by hand, and the end held here is the LAPI's give or take
// the latency of a pull.
const endSlack = time.Second

// drop forgets a decision: its prefix is lifted when no other holds it
// (counted expired when the decision had reached its end by now, removed
// otherwise), or banned until the latest end of those that do.
func (s *Decisions) drop(table Table, id int64, now time.Time) error {
	dec, ok := s.decisions[id]
	if !ok {
		return nil
	}
	ended := dec.end <= now.Add(endSlack).UnixNano()
	bp := s.forget(id, dec)
	if len(bp.ids) == 0 {
		if _, err := table.Lift(dec.prefix, s.origin); err != nil {
			return fmt.Errorf("lift %s: %w", dec.prefix, err)
		}
		s.freed = true
		if ended {
			s.counts.Expired++
		} else {
			s.counts.Removed++
		}
		return nil
	}
	var latest int64
	for _, other := range bp.ids {
		latest = max(latest, s.decisions[other].end)
	}
	if latest == bp.end {
		return nil
	}
	bp.end = latest
	s.prefixes[dec.prefix] = bp
	if _, err := table.Ban(dec.prefix, time.Unix(0, latest), s.origin); err != nil {
		if time.Unix(0, latest).After(time.Now()) {
			return fmt.Errorf("ban %s: %w", dec.prefix, err)
		}
		// The others ended too: the prefix goes, as at the sweep.
		if _, err := table.Lift(dec.prefix, s.origin); err != nil {
			return fmt.Errorf("lift %s: %w", dec.prefix, err)
		}
		s.freed = true
	}
	return nil
}

// forget removes decision id (dec) and its hold on its prefix, and
// returns the prefix's entry as it is left (no ids: forgotten too).
func (s *Decisions) forget(id int64, dec banDecision) bannedPrefix {
	delete(s.decisions, id)
	bp := s.prefixes[dec.prefix]
	if i := slices.Index(bp.ids, id); i >= 0 {
		bp.ids = slices.Delete(bp.ids, i, i+1)
	}
	if len(bp.ids) == 0 {
		delete(s.prefixes, dec.prefix)
	} else {
		s.prefixes[dec.prefix] = bp
	}
	return bp
}

// liftStrangers lifts the bans in table that no decision holds: after a
// full list, those are decisions deleted while the feed was away, or
// held by a predecessor that the LAPI no longer has.
func (s *Decisions) liftStrangers(table Table) error {
	in, err := inForce(table, s.origin)
	if err != nil {
		return fmt.Errorf("list the bans in force: %w", err)
	}
	var errs []error
	for _, p := range in {
		if _, ok := s.prefixes[p]; ok {
			continue
		}
		lifted, err := table.Lift(p, s.origin)
		if err != nil {
			errs = append(errs, fmt.Errorf("lift %s: %w", p, err))
			continue
		}
		if lifted {
			s.counts.Removed++
			s.freed = true
		}
	}
	return errors.Join(errs...)
}

// Expire sweeps the bans past their end from table and forgets the
// decisions that ended by now. The kernel ends bans on the monotonic
// clock, the state on the wall clock: a prefix whose last decision is
// forgotten is lifted too, so that no ban outlives what holds it.
func (s *Decisions) Expire(table Table, now time.Time) error {
	if table == nil {
		return nil
	}
	n, err := table.Expire(now, s.origin)
	s.counts.Expired += int64(n)
	s.freed = s.freed || n > 0
	errs := []error{err}
	at := now.UnixNano()
	for id, dec := range s.decisions {
		if dec.end > at {
			continue
		}
		if bp := s.forget(id, dec); len(bp.ids) > 0 {
			continue
		}
		lifted, err := table.Lift(dec.prefix, s.origin)
		if err != nil {
			errs = append(errs, fmt.Errorf("lift %s: %w", dec.prefix, err))
		} else if lifted {
			s.counts.Expired++
			s.freed = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sweep the expired bans: %w", err)
	}
	return nil
}

// Counts are the decisions' counts now (Active is the table's to count).
func (s *Decisions) Counts() Counts { return s.counts }

// Lifted counts n bans lifted behind the decisions' back (by allowed
// prefixes put in force), as removed.
func (s *Decisions) Lifted(n int) { s.counts.Removed += int64(n) }

// RoomBack records that bans of another origin left the table: room for
// the decisions refused over max, whose retry is then due.
func (s *Decisions) RoomBack() { s.freed = true }

// Synced records a good pull at at.
func (s *Decisions) Synced(at time.Time) { s.counts.Synced = at.Unix() }

// Failed records why the feed or the table failed last ("" once fine).
func (s *Decisions) Failed(msg string) { s.counts.Error = msg }
