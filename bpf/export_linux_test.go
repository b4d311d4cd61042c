package bpf

import (
	"fmt"
	"maps"
	"slices"
)

// WithoutMultiBuffer makes the programs until restore load as on a kernel
// without multi-buffer XDP (before 5.18): Attach cannot switch to it.
func WithoutMultiBuffer() (restore func()) {
	old := haveMultiBuffer
	haveMultiBuffer = func() error { return ErrNoMultiBuffer }
	return func() { haveMultiBuffer = old }
}

// EmbeddedPrograms are the names of the programs in the embedded ELF.
func EmbeddedPrograms() ([]string, error) {
	spec, err := embeddedSpec()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(spec.Programs)), nil
}

// ProgramSection is the ELF section of the embedded program named.
func ProgramSection(name string) (string, error) {
	spec, err := embeddedSpec()
	if err != nil {
		return "", err
	}
	prog, ok := spec.Programs[name]
	if !ok {
		return "", fmt.Errorf("no program %s", name)
	}
	return prog.SectionName, nil
}

// SetBanClock sets the time, in ns of the monotonic clock, the bans of
// programs loaded under UseLimitClock read.
func SetBanClock(t *BanTable, ns uint64) error { return t.setClock(ns) }

// MonoClock reads the clock ban ends are on.
var MonoClock = monoClock
