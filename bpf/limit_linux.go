//go:build linux

package bpf

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// seedLimits writes a random seed for the sketch's hashes into a fresh
// limiter: a sender who cannot know it cannot pick sources that share a
// victim's cells. Without limit rules there is nothing to seed.
func (o *objects) seedLimits() error {
	if o.LimitState == nil || o.LimitState.MaxEntries() <= uint32(xdpDropLimitLimitsLIMIT_SEED_CELL) {
		return nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("seed the limiter: %w", err)
	}
	if err := o.LimitState.Update(uint32(xdpDropLimitLimitsLIMIT_SEED_CELL), binary.NativeEndian.Uint64(b[:]), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("seed the limiter: %w", err)
	}
	return nil
}

// setLimitClock sets the test clock of a program loaded with limitFakeClock.
func (p *Program) setLimitClock(ns uint64) error {
	if p.objs.LimitState == nil {
		return errors.New("the program has no limiter")
	}
	return p.objs.LimitState.Update(uint32(xdpDropLimitLimitsLIMIT_CLOCK_CELL), ns, ebpf.UpdateAny)
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
