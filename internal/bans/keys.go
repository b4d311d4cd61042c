package bans

import (
	"errors"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
)

// The LAPI's stream keeps one decision per scope, value and type (its
// FormatDecisions deduplicates by them) and names it, new or deleted, by
// the id of any decision of that key: here is what the bans' state makes
// of a key.

// decisionKey is the LAPI's key of a decision, its scope, value and type
// (FNV-1a, each string closed by a 0xff byte no UTF-8 text holds): the
// stream deduplicates by it, and a prefix holds one or a few, so a
// collision between two of them does not happen in practice.
func decisionKey(dec crowdsec.Decision) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, s := range [...]string{dec.Scope, dec.Value, dec.Type} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		h = (h ^ 0xff) * prime
	}
	return h
}

// supersede forgets the decisions held of key under another id than dec's:
// the stream sends a key's decision anew when a longer one replaced it, and
// at a full list under the id of whichever of them it found first.
func (s *Decisions) supersede(dec crowdsec.Decision, key uint64) {
	ids := s.prefixes[dec.Prefix].ids
	for i := 0; i < len(ids); {
		if id := ids[i]; id != dec.ID && s.decisions[id].key == key {
			ids = s.forget(id, s.decisions[id]).ids
			continue
		}
		i++
	}
}

// lift puts a deleted entry of the stream in force: the LAPI lists a key
// as deleted once no decision of it is left, under the id of any of them
// (not always the one it sent as new), so every decision held of that key
// goes; decisions of other keys on the same prefix (another type, or the
// same range under scope Range and Ip) keep it banned.
func (s *Decisions) lift(table Table, dec crowdsec.Decision, now time.Time) error {
	key := decisionKey(dec)
	var buf [4]int64
	ids := buf[:0]
	if _, ok := s.decisions[dec.ID]; ok {
		ids = append(ids, dec.ID)
	}
	for _, id := range s.prefixes[dec.Prefix].ids {
		if id != dec.ID && s.decisions[id].key == key {
			ids = append(ids, id)
		}
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, s.drop(table, id, now))
	}
	return errors.Join(errs...)
}
