//go:build linux

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"golang.org/x/sys/unix"
)

// ErrNativeUnsupported is returned when the driver has no native XDP support.
var ErrNativeUnsupported = errors.New("driver does not support native XDP")

// ErrInterfaceGone is returned when the attached interface has been removed.
var ErrInterfaceGone = errors.New("interface was removed")

// Attach attaches the program to the interface with index ifindex.
//
// In native mode the single-buffer program is tried first; when the driver
// refuses it (an MTU that needs more than one buffer per frame), the
// multi-buffer variant is tried, and kept if the driver takes it. With
// ModeAuto every native refusal falls back to generic mode, and
// NativeError tells why; Mode tells which mode took.
func (p *Program) Attach(ifindex int, mode Mode) error {
	if p.link != nil {
		return errors.New("program is already attached")
	}
	p.nativeErr = nil
	switch mode {
	case ModeAuto:
		err := p.attachNative(ifindex)
		if err == nil || !nativeRefusal(err) {
			return err
		}
		if gerr := p.attach(ifindex, ModeGeneric); gerr != nil {
			return fmt.Errorf("%w; generic mode failed too: %w", err, gerr)
		}
		p.nativeErr = err
		return nil
	case ModeNative:
		return p.attachNative(ifindex)
	}
	return p.attach(ifindex, mode)
}

// nativeRefusal reports whether err is the driver refusing native XDP,
// where generic mode may still work: not a missing privilege, not a program
// already in the way.
func nativeRefusal(err error) bool {
	var existing *ExistingProgramError
	return !errors.Is(err, ErrPermission) && !errors.As(err, &existing)
}

// attachNative attaches in native mode, with the multi-buffer variant where
// the single-buffer program is refused and the multi-buffer one is not.
func (p *Program) attachNative(ifindex int) error {
	err := p.attach(ifindex, ModeNative)
	if err == nil || p.multiBuffer || !nativeRefusal(err) {
		return err
	}
	flags, _ := modeFlags(ModeNative)
	mbErr := p.tryMultiBuffer(func(alt *ebpf.Program) error {
		l, err := link.AttachXDP(link.XDPOptions{Program: alt, Interface: ifindex, Flags: flags})
		if err == nil {
			p.link, p.mode = l, ModeNative
		}
		return err
	})
	if mbErr != nil {
		return nativeError(ifindex, err, mbErr)
	}
	return nil
}

func (p *Program) attach(ifindex int, mode Mode) error {
	flags, ok := modeFlags(mode)
	if !ok {
		return fmt.Errorf("unknown XDP mode %s", quote.Value(string(mode)))
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.Prog, Interface: ifindex, Flags: flags})
	if err != nil {
		return attachError(ifindex, mode, err)
	}
	p.link = l
	p.mode = mode
	return nil
}

func attachError(ifindex int, mode Mode, err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return ErrPermission
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		if existing := existingProgram(ifindex); existing != nil {
			return existing
		}
	case errors.Is(err, unix.EOPNOTSUPP) && mode == ModeNative:
		return ErrNativeUnsupported
	}
	return fmt.Errorf("attach XDP in %s mode: %w", mode, err)
}

// update puts the program into l, a link attached in mode by an earlier
// run; where the device refuses the single-buffer program in native mode
// (its MTU needs multi-buffer XDP), the multi-buffer variant goes in
// instead.
func (p *Program) update(l link.Link, mode Mode) error {
	err := l.Update(p.objs.Prog)
	if err == nil || mode != ModeNative || p.multiBuffer {
		return err
	}
	if p.tryMultiBuffer(l.Update) != nil {
		return err
	}
	return nil
}

// inherit makes l, a link an earlier run attached in mode cur, the
// attachment of p. A link keeps its mode: where configured is ModeAuto and
// the link is in generic mode, NativeError says why native was not tried.
// from says whose link it was.
func (p *Program) inherit(l link.Link, cur, configured Mode, from string) {
	p.link, p.mode = l, cur
	if configured == ModeAuto && cur == ModeGeneric {
		p.nativeErr = fmt.Errorf("the %s attachment is in generic mode, as an earlier run attached it (configured so, or fallen back), and a link keeps its mode: native mode is tried when the interface is attached afresh", from)
	}
}

// modeOn returns the XDP program attached to ifindex and its mode ("" for
// none or one the kernel reports in a mode unknown here).
func modeOn(ifindex int) (ebpf.ProgramID, Mode, error) {
	id, attached, err := xdpProgramOn(ifindex)
	if err != nil {
		return 0, "", err
	}
	m, _ := attachedMode(attached)
	return id, m.mode, nil
}

// allows reports whether a link attached in mode cur may serve where mode
// configured is asked for: a link cannot change mode.
func allows(configured, cur Mode) bool {
	return configured == cur || configured == ModeAuto && (cur == ModeNative || cur == ModeGeneric)
}

// Attached reports whether the attachment still holds; it returns
// ErrInterfaceGone when the kernel detached it because the interface went away.
func (p *Program) Attached() error {
	if p.observed != 0 {
		return p.stillAttached()
	}
	if p.link == nil {
		return errors.New("not attached")
	}
	info, err := p.link.Info()
	if err != nil {
		return fmt.Errorf("read link info: %w", err)
	}
	if xdp := info.XDP(); xdp == nil || xdp.Ifindex == 0 {
		return ErrInterfaceGone
	}
	return nil
}

// Detach removes the program from its interface; the counters stay readable.
func (p *Program) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	p.mode = ""
	if err != nil {
		return fmt.Errorf("detach XDP link: %w", err)
	}
	return nil
}
