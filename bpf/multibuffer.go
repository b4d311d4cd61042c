//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
)

// ErrNoMultiBuffer is returned when the kernel cannot load multi-buffer XDP
// programs (before Linux 5.18).
var ErrNoMultiBuffer = errors.New("this kernel has no multi-buffer XDP (needs Linux 5.18, veth 5.19)")

// haveMultiBuffer probes once whether the kernel loads multi-buffer XDP
// programs: the helper that reads a whole frame's length came with them.
var haveMultiBuffer = sync.OnceValue(func() error {
	err := features.HaveProgramHelper(ebpf.XDP, asm.FnXdpGetBuffLen)
	if errors.Is(err, ebpf.ErrNotSupported) {
		return ErrNoMultiBuffer
	}
	return err
})

// UseMultiBuffer replaces the program, before it is attached, with its
// multi-buffer variant, which keeps the counters. Attach does this itself
// where a device needs it.
func (p *Program) UseMultiBuffer() error {
	if p.link != nil {
		return errors.New("program is already attached")
	}
	alt, err := p.loadMultiBuffer()
	if err != nil {
		return err
	}
	p.switchTo(alt)
	return nil
}

// MultiBuffer reports whether the program is the multi-buffer variant.
func (p *Program) MultiBuffer() bool { return p.multiBuffer }

// Features are the features of the program loaded (see programVariants).
func (p *Program) Features() Features {
	f := featuresOf(p.in.policy)
	if p.multiBuffer {
		f |= FeatureMultiBuffer
	}
	return f
}

// tryMultiBuffer loads the multi-buffer variant and gives it to put (an
// attach, a link's update); when put takes it, it becomes p's program.
// It returns why the variant could not serve.
func (p *Program) tryMultiBuffer(put func(*ebpf.Program) error) error {
	alt, err := p.loadMultiBuffer()
	if err != nil {
		return err
	}
	if err := put(alt); err != nil {
		alt.Close()
		return fmt.Errorf("the multi-buffer program was refused too: %w", err)
	}
	p.switchTo(alt)
	return nil
}

// loadMultiBuffer loads the multi-buffer variant on the same counters and
// the instance's rule maps.
func (p *Program) loadMultiBuffer() (*ebpf.Program, error) {
	if err := haveMultiBuffer(); err != nil {
		return nil, err
	}
	// The spec is made again rather than kept: it is needed only here, and
	// a Program per interface kept it for nothing otherwise.
	spec, err := p.in.spec()
	if err != nil {
		return nil, err
	}
	// A program taken over in place may have rule maps of the instance
	// that handed it over (not adopted): its variant gets this instance's.
	shared, err := p.in.shared()
	if err != nil {
		return nil, err
	}
	replace := shared.byName()
	for name, m := range p.objs.maps() {
		replace[name] = m
	}
	for name, m := range p.samples.byName() {
		replace[name] = m
	}
	if err := p.addBanMaps(p.in, spec, replace); err != nil {
		return nil, err
	}
	objs, err := loadVariant(spec, true, replace)
	if err != nil {
		return nil, err
	}
	// Clones of p's maps, or unused ones: the program holds its own references.
	objs.Counters.Close()
	objs.RuleCounters.Close()
	return objs.Prog, nil
}

// switchTo makes the multi-buffer program alt the program of p.
func (p *Program) switchTo(alt *ebpf.Program) {
	id, err := programID(alt)
	if err != nil {
		id = 0
	}
	p.objs.Prog.Close()
	p.objs.Prog = alt
	p.id = id
	p.multiBuffer = true
}
