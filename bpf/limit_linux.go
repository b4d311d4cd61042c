//go:build linux

package bpf

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// seedLimits writes a random seed for the sketch's hashes into fresh
// limiter cells: a sender who cannot know it cannot pick sources that
// share a victim's cells. Without limit rules (one cell) there is nothing
// to seed.
func seedLimits(state *ebpf.Map) error {
	if state == nil || state.MaxEntries() <= uint32(xdpDropLimitLimitsLIMIT_SEED_CELL) {
		return nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("seed the limiter: %w", err)
	}
	if err := state.Update(uint32(xdpDropLimitLimitsLIMIT_SEED_CELL), binary.NativeEndian.Uint64(b[:]), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("seed the limiter: %w", err)
	}
	return nil
}

// setLimitClock sets the test clock of a program loaded with limitFakeClock.
func (p *Program) setLimitClock(ns uint64) error {
	if p.in.ruleMaps == nil || p.in.ruleMaps.LimitState == nil {
		return errors.New("the program has no limiter")
	}
	return p.in.ruleMaps.LimitState.Update(uint32(xdpDropLimitLimitsLIMIT_CLOCK_CELL), ns, ebpf.UpdateAny)
}

// limitFakeClock makes the programs loaded take the limiter's time from
// the clock cell, for tests (see SetLimitClock).
var limitFakeClock = false

// setLimitSpec sets the limiter's constants and sizes its cells: all of
// them with limit rules, one entry (never touched) without.
func setLimitSpec(spec *ebpf.CollectionSpec, policy Policy) error {
	state := spec.Maps[xdpDropMapLimitState]
	if !policy.hasLimits() {
		state.MaxEntries = 1
		return nil
	}
	state.MaxEntries = uint32(xdpDropLimitLimitsLIMIT_CELLS)
	if err := spec.Variables[xdpDropVarLimitParams].Set(policy.limitParams()); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarLimitParams, err)
	}
	if err := spec.Variables[xdpDropVarLimitFakeClock].Set(boolByte(limitFakeClock)); err != nil {
		return fmt.Errorf("set %s: %w", xdpDropVarLimitFakeClock, err)
	}
	return nil
}

// ContinueLimits makes the rule maps the instance loads go on with the
// limiter cells of from, the instance it follows (a generation of prefix
// files before it, or the one a program swaps from), when they are not
// loaded yet: the budgets spent, and the seed that finds them, stay. It
// takes the cells from's rule maps hold, or those from was to take over
// itself, and holds its own reference: from may be closed after.
func (in *Instance) ContinueLimits(from *Instance) {
	if from == nil || from == in {
		return
	}
	from.mu.Lock()
	var state *ebpf.Map
	switch {
	case from.ruleMaps != nil && from.ruleMaps.LimitState != nil:
		state, _ = from.ruleMaps.LimitState.Clone()
	case from.ruleMaps == nil && from.limits != nil:
		state, _ = from.limits.Clone()
	}
	from.mu.Unlock()
	if state == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ruleMaps != nil || in.limits != nil {
		state.Close()
		return
	}
	in.limits = state
}
