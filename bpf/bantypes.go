package bpf

import (
	"net/netip"
	"time"
)

// BansConfig turns on timed bans: source addresses and ranges dropped at
// the driver until their end, which the kernel decides (see BanTable).
// The zero value is off: the programs then have no ban code at all.
type BansConfig struct {
	// On loads the programs with bans (FeatureBans) and the instance's
	// ban maps (Instance.Bans).
	On bool
	// DryRun counts the frames a ban would drop (BanWouldDrop) and lets
	// them go on to the rules and the protocol policy as if unbanned.
	DryRun bool
	// Max is the most bans in force per family; 0 is DefaultBanMax. A ban
	// beyond it is refused (BanRefusedFull).
	Max int
}

// DefaultBanMax is BansConfig.Max when it is 0.
const DefaultBanMax = 100_000

// MaxBanAllow is the most allowed prefixes per family (BanTable.SetAllow):
// they share the ban maps, sized for Max bans and this many allowed.
const MaxBanAllow = 16384

// MaxBanLimit bounds BansConfig.Max: the ban maps are preallocated.
const MaxBanLimit = 4_000_000

// BanOrigins is how many origins bans carry (BanCounts, Ban's origin).
const BanOrigins = 4

// Ban origins the product knows; the others are free.
const (
	BanOriginCrowdSec uint8 = 0
	BanOriginDetect   uint8 = 1
)

// max is c.Max, DefaultBanMax for 0.
func (c BansConfig) max() int {
	if c.Max == 0 {
		return DefaultBanMax
	}
	return c.Max
}

// BanOutcome is what BanTable.Ban did with a ban.
type BanOutcome uint8

const (
	// BanAdded: the origin's claim is new, in force now (on a prefix
	// another origin holds, a claim of its own, not a new entry).
	BanAdded BanOutcome = iota
	// BanUpdated: the origin had a claim on the prefix; its end changed.
	BanUpdated
	// BanUnchanged: the origin's claim, same end, was in force (a resync).
	BanUnchanged
	// BanRefusedAllowed: the prefix is inside (or is) an allowed prefix.
	BanRefusedAllowed
	// BanRefusedFull: Max bans of its family are in force already.
	BanRefusedFull
)

var banOutcomeNames = [...]string{"added", "updated", "unchanged", "allow-listed", "full"}

// String names the outcome as the plugin reports it.
func (o BanOutcome) String() string {
	if int(o) < len(banOutcomeNames) {
		return banOutcomeNames[o]
	}
	return "unknown"
}

// Refused reports whether the ban was not put in force.
func (o BanOutcome) Refused() bool { return o == BanRefusedAllowed || o == BanRefusedFull }

// BanEntry is one origin's claim the table holds (BanTable.Entries).
type BanEntry struct {
	Prefix netip.Prefix
	// End is when the claim ends (wall clock, converted from the monotonic
	// end the kernel holds); the prefix is banned until its latest claim's.
	End    time.Time
	Origin uint8
	// LimitPPS is 0 for a drop claim (BanTable.Ban); for a limit claim
	// (BanTable.Limit), the frames a second the prefix is capped at.
	LimitPPS uint64
}

// IsLimit reports whether the claim caps the prefix's rate (BanTable.Limit)
// rather than dropping all of it.
func (e BanEntry) IsLimit() bool { return e.LimitPPS != 0 }

// MaxBanLimitPPS bounds BanTable.Limit's pps: one frame a nanosecond.
const MaxBanLimitPPS = 1_000_000_000

// BanAction is what a ban did with a frame: BanDrop, or BanWouldDrop in a
// bans dry run.
type BanAction uint8

const (
	BanDrop BanAction = iota
	BanWouldDrop
	banActions
)

// String names the action as the plugin tags it.
func (a BanAction) String() string {
	if a == BanWouldDrop {
		return "would_drop"
	}
	return "drop"
}
