//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// iface is one configured or matched interface and, when attached, its program.
type iface struct {
	name     string
	matched  bool   // found by a glob pattern, not named exactly
	missing  bool   // the last attach found no such interface
	ifindex  int    // of the interface the program is attached to
	netns    uint64 // inode of the network namespace it is in, for handover
	prog     *bpf.Program
	err      error  // why it is not attached
	reported string // the last error reported through the accumulator
	counters bpf.Block
	series   seriesLog // the series the gathers emitted, for first-burst zeros
	tap      tap       // its part of the sampling, with sample_rate (sampler_linux.go)
	rulesGen uint64    // the rule prefixes its program holds (prefixLists.gen)
	swapErr  error     // why the last swap to the policy's prefixes failed; nil once one succeeds
	// stuck: the holder offering the interface did not answer, in this attach.
	stuck *handover.StuckError
	// observer names whose program prog is when it was observed (Observe),
	// not attached here; it stays set, so the interface is only observed.
	observer string
	// attachment: how the observed program is attached.
	attachment bpf.Attachment
}

// attach gets the interface its program, whatever the route (see
// bpf.Instance.Acquire); on any failure nothing is left attached or loaded.
func (l *links) attach(ifc *iface) error {
	dev, err := net.InterfaceByName(ifc.name)
	ifc.missing = err != nil && !lookupFailed(err)
	switch {
	case ifc.missing:
		ifc.err = unknownInterface(ifc.name)
		return ifc.err
	case err != nil:
		ifc.err = l.explain(ifc.name, fmt.Errorf("look up the interface: %w", err))
		return ifc.err
	}
	ifc.stuck = nil
	if l.console.on {
		if observed, err := l.console.observe(ifc, dev.Index, l.policy); observed || err != nil {
			return err
		}
	}
	if l.console.readOnly {
		ifc.err = fmt.Errorf("interface %s: no xdp_drop instance holds it: no XDP program is attached, and this read-only run attaches none", quote.Value(ifc.name))
		return ifc.err
	}
	want := bpf.Want{
		Ifindex: dev.Index, Name: ifc.name, Mode: l.mode,
		PinPath: l.opts.pinPath, KeepAttached: l.opts.keepAttached, Replace: l.opts.replace,
	}
	if ifc.netns, err = handover.CurrentNetNS(); err == nil {
		l.handoff.want(&want, ifc, taker{log: l.log, ifaces: l.ifaces, instance: l.instance})
	}
	got, err := l.instance().Acquire(want)
	l.logNotes(ifc.name, got.Notes)
	err = advise(err)
	if err != nil {
		if vanished(ifc.name, dev.Index) {
			// Removed between the lookup and the attach: not a failure.
			ifc.missing = true
			ifc.err = &notFoundError{name: ifc.name, midAttach: true}
			if l.opts.pinPath != "" {
				l.removePins(ifc.name)
			}
			return ifc.err
		}
		if ifc.stuck != nil {
			ifc.err = stuckError(ifc.name, err, ifc.stuck)
			return ifc.err
		}
		ifc.err = l.explain(ifc.name, err)
		return ifc.err
	}
	ifc.prog = got.Program
	ifc.ifindex = dev.Index
	ifc.series.attached(l.gathers)
	ifc.rulesGen, ifc.swapErr = l.files.gen, nil
	if got.KeptRuleMaps && l.files.rules != nil {
		// The program kept holds the prefixes its files held then.
		ifc.rulesGen = staleRules
	}
	ifc.err = nil
	ifc.reported = ""
	return nil
}

func (l *links) release(ifc *iface, why error) {
	if ifc.prog == nil {
		return
	}
	l.sampling.stop(&ifc.tap)
	if err := ifc.prog.Close(); err != nil {
		l.log.Errorf("interface %s: detach: %v", quote.Value(ifc.name), err)
	}
	ifc.prog = nil
	ifc.err = why
}

// logNotes logs what Acquire reports, under the interface's name.
func (l *links) logNotes(name string, notes []bpf.Note) {
	for _, n := range notes {
		text := noteText(n, l.opts.keepAttached)
		if !n.Instance {
			text = fmt.Sprintf("interface %s: %s", quote.Value(name), text)
		}
		if n.Warn {
			l.log.Warnf("%s", text)
		} else {
			l.log.Infof("%s", text)
		}
	}
}

// fellBack reports whether mode = "auto" fell back to generic mode.
func fellBack(mode bpf.Mode, prog *bpf.Program) bool {
	return mode == bpf.ModeAuto && prog.Mode() == bpf.ModeGeneric
}

// vanished reports whether the interface that had index ifindex is gone
// (or another one has its name now).
func vanished(name string, ifindex int) bool {
	dev, err := net.InterfaceByName(name)
	if err != nil {
		return !lookupFailed(err)
	}
	return dev.Index != ifindex
}

// lookupFailed tells an interface lookup that could not be made (out of
// file descriptors, say) from one that found no such interface.
func lookupFailed(err error) bool {
	var sysErr *os.SyscallError
	return errors.As(err, &sysErr)
}

// notFoundError says an interface does not exist and which ones do, or
// that it was removed.
type notFoundError struct {
	name      string
	here      []string
	removedID ebpf.ProgramID // the program that went with it
	midAttach bool           // removed while it was being attached
}

func (e *notFoundError) Error() string {
	switch {
	case e.removedID != 0:
		return fmt.Sprintf("interface %s not found: it was removed, and program id %d with it; it is attached again once it appears", quote.Value(e.name), e.removedID)
	case e.midAttach:
		return fmt.Sprintf("interface %s not found: it was removed while it was being attached; it is attached once it appears again", quote.Value(e.name))
	}
	return fmt.Sprintf("interface %s not found (interfaces here: %s); it is attached once it appears", quote.Value(e.name), strings.Join(e.here, ", "))
}

// gone says how a matched interface went away, for the log.
func (e *notFoundError) gone() string {
	switch {
	case e.removedID != 0:
		return fmt.Sprintf("removed, and program id %d with it", e.removedID)
	case e.midAttach:
		return "removed while it was being attached"
	}
	return "gone before it could be attached"
}

func unknownInterface(name string) error {
	e := &notFoundError{name: name}
	if list, err := net.Interfaces(); err == nil {
		for _, i := range list {
			e.here = append(e.here, quote.Tag(i.Name))
		}
	}
	sort.Strings(e.here)
	return e
}
