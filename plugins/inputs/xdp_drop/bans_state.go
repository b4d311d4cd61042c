package xdp_drop

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
)

// banOutcome is what the kernel's ban table made of one ban.
type banOutcome int

const (
	banAdded   banOutcome = iota // a prefix not banned before
	banUpdated                   // a prefix banned already: its end moved
	banAllowed                   // refused: the prefix is allow-listed
	banFull                      // refused: max bans of its family in force
)

// banTable is what the bans need of the kernel's ban table, for one
// origin: bans with their end, lifts, the sweep of those past their end,
// and what is in force.
type banTable interface {
	Ban(p netip.Prefix, end time.Time) (banOutcome, error)
	Lift(p netip.Prefix) error
	// Expire removes the bans past their end (the kernel stopped
	// dropping for them then) and says how many.
	Expire(now time.Time) (int, error)
	// InForce lists the prefixes banned.
	InForce() ([]netip.Prefix, error)
}

// banCounts are the bans' counts since this process started them.
type banCounts struct {
	Active  int64  // bans in force
	Added   int64  // prefixes banned
	Removed int64  // bans lifted: a decision deleted, or gone at a resync
	Expired int64  // bans past their end, swept
	Refused int64  // decisions refused: allow-listed, over max, unsupported
	Synced  int64  // unix time of the last good pull; 0 before one
	Error   string // why the feed or the table failed last; "" once fine
}

// banState holds the decisions in force by id and their prefixes: a
// prefix several decisions cover is banned until the latest of their
// ends, and lifted when the last of them goes. Ends are unix nanoseconds:
// a ban here costs about 170 bytes, whatever the LAPI sends.
type banState struct {
	decisions map[int64]banDecision
	prefixes  map[netip.Prefix]bannedPrefix
	counts    banCounts
}

type banDecision struct {
	prefix netip.Prefix
	end    int64
}

// bannedPrefix is a prefix in the table: its end there, and the decisions
// that hold it (most often one).
type bannedPrefix struct {
	end int64
	ids []int64
}

func newBanState() *banState {
	return &banState{
		decisions: map[int64]banDecision{},
		prefixes:  map[netip.Prefix]bannedPrefix{},
	}
}

// apply puts a delta of the feed in force in table, at now. A full list
// (startup) replaces the decisions held: what it lacks is lifted, also
// bans in table that this state never saw (a predecessor's).
func (s *banState) apply(table banTable, d crowdsec.Delta, now time.Time) error {
	var errs []error
	for _, n := range d.Ignored {
		s.counts.Refused += int64(n)
	}
	if d.Startup {
		keep := make(map[int64]bool, len(d.New))
		for _, dec := range d.New {
			keep[dec.ID] = true
		}
		for id := range s.decisions {
			if !keep[id] {
				errs = append(errs, s.drop(table, id, now))
			}
		}
	}
	for _, dec := range d.Deleted {
		errs = append(errs, s.drop(table, dec.ID, now))
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
func (s *banState) add(table banTable, dec crowdsec.Decision, now time.Time) error {
	if dec.Duration <= 0 {
		return nil // over already
	}
	end := now.Add(dec.Duration).UnixNano()
	if old, ok := s.decisions[dec.ID]; ok && old.prefix != dec.Prefix {
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
	if held && want == bp.end {
		s.hold(dec, end, bp)
		return nil
	}
	got, err := table.Ban(dec.Prefix, time.Unix(0, want))
	if err != nil {
		return fmt.Errorf("ban %s: %w", dec.Prefix, err)
	}
	switch got {
	case banAllowed, banFull:
		s.counts.Refused++
		return nil
	case banAdded:
		s.counts.Added++
	}
	bp.end = want
	s.hold(dec, end, bp)
	return nil
}

// hold records that dec holds its prefix, in the table until bp.end.
func (s *banState) hold(dec crowdsec.Decision, end int64, bp bannedPrefix) {
	if _, again := s.decisions[dec.ID]; !again {
		bp.ids = append(bp.ids, dec.ID)
	}
	s.decisions[dec.ID] = banDecision{prefix: dec.Prefix, end: end}
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
func (s *banState) drop(table banTable, id int64, now time.Time) error {
	dec, ok := s.decisions[id]
	if !ok {
		return nil
	}
	ended := dec.end <= now.Add(endSlack).UnixNano()
	bp := s.forget(id, dec)
	if len(bp.ids) == 0 {
		if err := table.Lift(dec.prefix); err != nil {
			return fmt.Errorf("lift %s: %w", dec.prefix, err)
		}
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
	if _, err := table.Ban(dec.prefix, time.Unix(0, latest)); err != nil {
		return fmt.Errorf("ban %s: %w", dec.prefix, err)
	}
	return nil
}

// forget removes decision id (dec) and its hold on its prefix, and
// returns the prefix's entry as it is left (no ids: forgotten too).
func (s *banState) forget(id int64, dec banDecision) bannedPrefix {
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
func (s *banState) liftStrangers(table banTable) error {
	in, err := table.InForce()
	if err != nil {
		return fmt.Errorf("list the bans in force: %w", err)
	}
	var errs []error
	for _, p := range in {
		if _, ok := s.prefixes[p]; ok {
			continue
		}
		if err := table.Lift(p); err != nil {
			errs = append(errs, fmt.Errorf("lift %s: %w", p, err))
			continue
		}
		s.counts.Removed++
	}
	return errors.Join(errs...)
}

// expire sweeps the bans past their end from table and forgets the
// decisions that ended by now.
func (s *banState) expire(table banTable, now time.Time) error {
	n, err := table.Expire(now)
	s.counts.Expired += int64(n)
	at := now.UnixNano()
	for id, dec := range s.decisions {
		if dec.end <= at {
			s.forget(id, dec)
		}
	}
	if err != nil {
		return fmt.Errorf("sweep the expired bans: %w", err)
	}
	return nil
}
