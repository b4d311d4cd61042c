package bpf

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Limit is the budget of a limit rule: Rate frames per second with bursts
// of Burst, per source (the source address masked to PrefixV4 or PrefixV6
// bits) or, with PerRule, for all the frames the rule matches together.
type Limit struct {
	Rate    uint64 // frames per second, 1..MaxLimitRate
	Burst   uint64 // frames, 1..MaxLimitBurst
	PerRule bool
	// PrefixV4 and PrefixV6 group sources for a per-source budget.
	PrefixV4, PrefixV6 uint8
}

// MaxLimitRate and MaxLimitBurst bound a budget so that the limiter's
// arithmetic in ns cannot overflow: an interval is at least 1 ns, and a
// burst at most 1e18 ns ahead of now.
const (
	MaxLimitRate  = 1_000_000_000
	MaxLimitBurst = 1_000_000_000
)

// The limiter's sketch (see bpf/limit.h): LimitRows rows of LimitCols
// cells of 8 bytes, shared by the per-source limit rules of a program.
const (
	LimitRows = int(xdpDropLimitLimitsLIMIT_ROWS)
	LimitCols = int(xdpDropLimitLimitsLIMIT_COLS)
	// LimitMemory is the size of the limiter's cells in bytes: the sketch,
	// a cache line per rule for per-rule budgets, the seed and the clocks.
	LimitMemory = int(xdpDropLimitLimitsLIMIT_CELLS) * 8
)

// ruleDimLimits marks, in ruleTables.dims, rules with a Limit. The program
// does not read it: the programs with limit rules are their own.
const ruleDimLimits = 0x80

func (r *Rule) checkLimit() error {
	l := r.Limit
	switch {
	case r.Drop:
		return errors.New("has both a drop action and a limit")
	case l.Rate == 0 || l.Rate > MaxLimitRate:
		return fmt.Errorf("limit rate %d is not within 1..%d", l.Rate, MaxLimitRate)
	case l.Burst == 0 || l.Burst > MaxLimitBurst:
		return fmt.Errorf("limit burst %d is not within 1..%d", l.Burst, MaxLimitBurst)
	case l.PrefixV4 > 32 || l.PrefixV6 > 128:
		return fmt.Errorf("limit prefixes /%d and /%d are out of range", l.PrefixV4, l.PrefixV6)
	}
	return nil
}

// hasLimits reports whether a rule of the policy is a limit rule: the
// program is then the one with the limiter.
func (p Policy) hasLimits() bool {
	for i := range p.Rules {
		if p.Rules[i].Limit != nil {
			return true
		}
	}
	return false
}

// coarsestTick is the longest a kernel tick lasts (HZ = 100): the coarse
// clock the limiter reads moves once a tick, so a budget whose burst lasts
// less than that reads the precise clock.
const coarsestTick = 10 * time.Millisecond

// limitParams are the program's limit_params: each limit rule's interval
// and tolerance in ns, by rule index.
func (p Policy) limitParams() [MaxRules]xdpDropLimitParam {
	var out [MaxRules]xdpDropLimitParam
	for i, r := range p.Rules {
		l := r.Limit
		if l == nil {
			continue
		}
		interval := uint64(math.Round(1e9 / float64(l.Rate)))
		out[i] = xdpDropLimitParam{
			Interval: interval,
			Tau:      (l.Burst - 1) * interval,
			Prefix4:  l.PrefixV4,
			Prefix6:  l.PrefixV6,
		}
		if l.PerRule {
			out[i].Flags |= uint8(xdpDropLimitLimitsLIMIT_PER_RULE)
		}
		if out[i].Tau+out[i].Interval < uint64(coarsestTick) {
			out[i].Flags |= uint8(xdpDropLimitLimitsLIMIT_FINE_CLOCK)
		}
	}
	return out
}
