// Package bans is the bouncer: the decisions in force of a feed (the
// CrowdSec stream), put on the kernel's ban table under their origin, and
// counted. It imports bpf and internal/*, never Telegraf nor the plugin:
// the plugin turns its options into the settings and its counts into
// points.
package bans

import (
	"errors"
	"net/netip"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// Table is what the bans need of the kernel's ban table, stated with
// bpf's types so that *bpf.BanTable is one: each origin's claims with
// their end, lifted or swept past their end apart from the other
// origins', and the claims held.
type Table interface {
	Ban(p netip.Prefix, end time.Time, origin uint8) (bpf.BanOutcome, error)
	// Lift removes origin's claim on p and says whether there was one.
	Lift(p netip.Prefix, origin uint8) (bool, error)
	// Expire removes origin's claims past their end (the kernel stopped
	// dropping for them then) and says how many.
	Expire(now time.Time, origin uint8) (int, error)
	// Entries lists the claims held, one per origin and prefix.
	Entries() []bpf.BanEntry
}

var errNoBanTable = errors.New("no ban table loaded yet")

// inForce lists the prefixes origin holds a claim on in t.
func inForce(t Table, origin uint8) ([]netip.Prefix, error) {
	if t == nil {
		return nil, errNoBanTable
	}
	var out []netip.Prefix
	for _, e := range t.Entries() {
		if e.Origin == origin {
			out = append(out, e.Prefix)
		}
	}
	return out, nil
}

// Counts are a feed's counts since this process started its bans.
type Counts struct {
	Active  int64  // bans in force
	Added   int64  // prefixes banned
	Removed int64  // bans lifted: a decision deleted, or gone at a resync
	Expired int64  // bans past their end, swept
	Refused int64  // decisions refused: allow-listed, over max, unsupported
	Synced  int64  // unix time of the last good pull; 0 before one
	Error   string // why the feed or the table failed last; "" once fine
}
