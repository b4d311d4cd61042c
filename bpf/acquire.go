//go:build linux

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Want is what Acquire is asked for: an interface, the mode, and what the
// configuration says of pins, of programs in the way and of handovers.
type Want struct {
	Ifindex int
	// Name is the interface's name: its pin directory's, under PinPath.
	Name string
	Mode Mode
	// PinPath is where interfaces' pin directories are; "" pins nothing.
	PinPath string
	// KeepAttached keeps the attachment past the process (with PinPath).
	KeepAttached bool
	// Replace removes a program in the way that no running xdp_drop owns.
	Replace bool
	// Handed is what a stopping instance handed over for the interface,
	// nil when nothing was.
	Handed *Handed
	// AwaitHanded, when set, is asked when an xdp_drop program (or one
	// this process may not inspect) is in the way: it waits for a stopping instance to offer the interface, and
	// says whether one did, with what it handed over (nil when taking it
	// failed: the fresh attach is tried again).
	AwaitHanded func() (offered bool, h *Handed)
}

// Route is how an interface got its program.
type Route int

const (
	// RouteFresh attached a program loaded for the interface.
	RouteFresh Route = iota
	// RouteKept put the program into the link an earlier run kept
	// (KeepAttached), without a gap.
	RouteKept
	// RouteHandedOver took over in place what a stopping instance
	// handed over.
	RouteHandedOver
	// RouteReplaced removed another program in the way (Replace).
	RouteReplaced
)

// Got is what Acquire got: the program, attached, how, and what happened
// on the way that the operator is told.
type Got struct {
	Program *Program
	Route   Route
	// Continued says the counters continue those of an earlier program
	// (handed over with the same fingerprint).
	Continued bool
	// KeptRuleMaps says the program taken over in place kept the rule maps
	// it was handed over with, not the instance's (AdoptRules did not
	// adopt them): changed prefix files must be swapped into it.
	KeptRuleMaps bool
	Notes        []Note
}

// Note is one thing Acquire reports, in the order it happened. Text says
// it; Kind, with ID and Err, lets a caller say it in its own words.
type Note struct {
	Kind NoteKind
	Warn bool
	// Instance says the note is about the instance, not the interface.
	Instance bool
	Text     string
	ID       ebpf.ProgramID
	Err      error
}

// NoteKind tells the notes a caller may word itself from the others.
type NoteKind int

const (
	// NoteText is said as Text says.
	NoteText NoteKind = iota
	// NoteUnpinned: attached without pins, Err says why (an
	// *UnpinnableError); with KeepAttached, nothing keeps it attached either.
	NoteUnpinned
	// NoteTakenOverUnpinned: taken over without pins, Err says why.
	NoteTakenOverUnpinned
	// NoteKeptReleased: a link an earlier run kept was released, as
	// KeepAttached is off.
	NoteKeptReleased
	// NoteReplaced: the program ID in the way was replaced (Replace).
	NoteReplaced
	// NoteFellBack: ModeAuto fell back to generic mode; Err says why
	// native mode failed.
	NoteFellBack
	// NoteMountedBPFFS: the BPF filesystem was mounted on DefaultBPFFS
	// for the pins.
	NoteMountedBPFFS
)

func (g *Got) info(format string, args ...any) {
	g.Notes = append(g.Notes, Note{Text: fmt.Sprintf(format, args...)})
}

func (g *Got) warn(format string, args ...any) {
	g.Notes = append(g.Notes, Note{Warn: true, Text: fmt.Sprintf(format, args...)})
}

// Acquire gets the interface its program, whatever the route: what a
// stopping instance handed over, taken over in place; else a fresh program,
// with its counters pinned and its link kept when asked, put into the link
// an earlier run kept, or attached, after waiting for a handover of the
// xdp_drop program in the way, or removing the program in the way when
// Replace allows. On any error nothing is left attached or loaded, and
// the notes so far say what happened on the way. Program.Close releases
// what it got.
func (in *Instance) Acquire(w Want) (Got, error) {
	var got Got
	handed := w.Handed
	for {
		if handed != nil {
			if took, err := in.acquireHanded(w, handed, &got); took || err != nil {
				return got, err
			}
		}
		// A predecessor still stopping may hand the interface over, and its
		// rule maps with it, in a moment: wait for it before loading any, so
		// that those it hands over do not meet a set of this instance's own.
		if handed == nil && w.AwaitHanded != nil && in.rulesUnloaded() && predecessorInTheWay(w.Ifindex) {
			if offered, h := w.AwaitHanded(); offered && h != nil {
				handed = h
				continue
			}
		}
		p, pinned, route, err := in.acquireFresh(w, &got)
		var existing *ExistingProgramError
		// An xdp_drop program, or one this process may not tell (under file
		// capabilities): maybe this instance's predecessor, still stopping.
		maybeOurs := errors.As(err, &existing) && (existing.Name == ProgramName || existing.Uninspectable)
		if maybeOurs && w.AwaitHanded != nil {
			var offered bool
			if offered, handed = w.AwaitHanded(); offered {
				// A stopping instance is handing the interface over.
				p.Close()
				continue
			}
		}
		if errors.As(err, &existing) && w.Replace {
			route = RouteReplaced
			err = in.replace(p, w, existing, pinned, &got)
		}
		if err != nil {
			if p != nil {
				p.Close()
			}
			return got, err
		}
		got.Program, got.Route = p, route
		got.attached(w.Mode)
		return got, nil
	}
}

// acquireHanded takes over what was handed over, and answers the
// handover. It reports whether it took it, or why it failed for good;
// otherwise the interface is attached afresh.
func (in *Instance) acquireHanded(w Want, h *Handed, got *Got) (bool, error) {
	p, continued, err := in.takeOver(w, h, got)
	var foreign *ForeignError
	switch {
	case errors.Is(err, ErrModeChanged):
		h.settle(true, "")
		got.warn("%v: attaching afresh (a moment unfiltered)", err)
		return false, nil
	case errors.As(err, &foreign):
		h.settle(false, err.Error())
		got.warn("ignored what the handover offered: %v", err)
		return false, nil
	case err != nil:
		h.settle(false, err.Error())
		return false, err
	}
	h.settle(true, "")
	got.Program, got.Route, got.Continued = p, RouteHandedOver, continued
	got.KeptRuleMaps = continued && p.objs.RuleCounters != nil && !in.runsOnShared(p.objs.Prog)
	got.fellBack(w.Mode)
	if continued {
		got.info("taken over in place, program id %d; counters continue", p.ID())
	} else {
		got.info("taken over in place, program id %d (was %d); counters restart from zero: the drop policy, the rules or the program version changed",
			p.ID(), h.ProgramID)
	}
	in.pinTakenOver(w, p, continued, got)
	return true, nil
}

// acquireFresh loads a program for the interface and attaches it, into
// the link an earlier run kept when there is one to take over. On error
// the program is returned when it was loaded, for the caller to try again
// (Replace) or close.
func (in *Instance) acquireFresh(w Want, got *Got) (p *Program, pinned bool, route Route, err error) {
	p, pinned, err = in.loadFor(w, got)
	if err != nil {
		return nil, false, RouteFresh, err
	}
	route, err = in.attach(p, w, pinned, got)
	return p, pinned, route, err
}

// attach attaches p, keeping the attachment past the process when
// KeepAttached is set and pins are usable.
func (in *Instance) attach(p *Program, w Want, pinned bool, got *Got) (Route, error) {
	if !w.KeepAttached || !pinned {
		return RouteFresh, p.Attach(w.Ifindex, w.Mode)
	}
	note, tookOver, err := p.attachKept(w.Ifindex, w.Mode, pinDirOf(w))
	if note != "" {
		got.info("%s", note)
	}
	if tookOver {
		return RouteKept, err
	}
	return RouteFresh, err
}

// replace removes the program in the way and attaches p instead. Only a
// program that is in the way is replaced; a link kept by an earlier run
// has been taken over by attach, without a gap. A running xdp_drop is
// never replaced: two instances would take the interface in turns.
func (in *Instance) replace(p *Program, w Want, existing *ExistingProgramError, pinned bool, got *Got) error {
	if existing.Name == ProgramName {
		if err := checkNotLive(w.Ifindex, existing.ID); err != nil {
			return err
		}
	}
	if err := removeExisting(w.Ifindex); err != nil {
		return &ReplaceError{ID: existing.ID, Err: err}
	}
	got.Notes = append(got.Notes, Note{Kind: NoteReplaced, Warn: true, ID: existing.ID, Text: fmt.Sprintf("replaced XDP program id %d in the way", existing.ID)})
	_, err := in.attach(p, w, pinned, got)
	return err
}

// attached notes how the program is attached.
func (g *Got) attached(mode Mode) {
	p := g.Program
	g.fellBack(mode)
	if p.MultiBuffer() {
		g.info("attached in %s mode, program id %d, multi-buffer: the device's MTU needs more than one buffer per frame", p.Mode(), p.ID())
		return
	}
	g.info("attached in %s mode, program id %d", p.Mode(), p.ID())
}

// fellBack notes that ModeAuto fell back to generic mode.
func (g *Got) fellBack(mode Mode) {
	if mode == ModeAuto && g.Program.Mode() == ModeGeneric {
		err := g.Program.NativeError()
		g.Notes = append(g.Notes, Note{Kind: NoteFellBack, Warn: true, Err: err, Text: fmt.Sprintf("auto mode fell back to generic mode (slower): %v", err)})
	}
}

func closeFD(fd int) { unix.Close(fd) }

// rulesUnloaded reports whether the instance has rules whose maps it has
// not loaded yet.
func (in *Instance) rulesUnloaded() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.policy.Rules) > 0 && in.ruleMaps == nil
}

// predecessorInTheWay reports whether ifindex runs an xdp_drop program, or
// one this process may not tell: maybe this instance's predecessor's.
func predecessorInTheWay(ifindex int) bool {
	e := existingProgram(ifindex)
	return e != nil && (e.Name == ProgramName || e.Uninspectable)
}
