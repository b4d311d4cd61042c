//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
)

func handoverDir(instance string) (string, string) {
	dir, note := handover.Dir()
	return handover.InstanceDir(dir, instance), note
}

// Waits on a stopping instance and its holder: in all, at most startWait
// in Start (for the instance to offer an interface it still holds, and for
// its holder to answer) and gatherWait in a gather; a stopped holder is not
// waited for at all. A holder that answers runs and answers in well under
// minTakeWait.
const (
	startWait   = 2 * time.Second
	gatherWait  = 250 * time.Millisecond
	minTakeWait = 20 * time.Millisecond
)

// prepareHandover makes the handover directory at start, so that a stop
// does not find it unusable only when a reload needs it.
func (x *XDPDrop) prepareHandover() {
	if x.HandoverTimeout == 0 {
		return
	}
	if x.handoverNote != "" {
		x.Log.Warnf("handover: %s; until then the handover sockets are in %s, where another user could take the name first and so refuse every handover", x.handoverNote, x.handoverDir)
	}
	if err := handover.Prepare(x.handoverDir); err != nil {
		x.Log.Errorf("handover: %v: a stop could not hand the interfaces over, so every reload would leave them unfiltered for a moment and restart their counters; "+
			"fix the directory, or set RUNTIME_DIRECTORY (systemd: RuntimeDirectory=) to one this user owns, or set handover_timeout = \"0s\" to detach on stop", err)
	}
}

// handOver gives the attached interfaces to a holder process that keeps
// them for handover_timeout, for a successor to take over in place; a link
// pinned for keep_attached needs no holder. It does not release them here:
// Stop closes this process's copies as usual.
func (x *XDPDrop) handOver() {
	var offers []handover.Offer
	var names []*iface
	for _, ifc := range x.ifaces {
		if ifc.prog == nil || ifc.prog.Kept() || ifc.prog.Observed() || ifc.prog.Attached() != nil {
			continue
		}
		l, p, m, err := ifc.prog.FDs()
		if err != nil {
			continue
		}
		fds := []int{l, p, m}
		if r, ok := ifc.prog.RuleCountersFD(); ok {
			fds = append(fds, r)
		}
		offers = append(offers, handover.Offer{
			Header: handover.Header{
				Key:         handover.Key{NetNS: ifc.netns, Ifindex: ifc.ifindex},
				Interface:   ifc.name,
				Mode:        string(ifc.prog.Mode()),
				Fingerprint: ifc.prog.Fingerprint(),
				ProgramID:   uint32(ifc.prog.ID()),
				MultiBuffer: ifc.prog.MultiBuffer(),
			},
			FDs: fds,
		})
		names = append(names, ifc)
	}
	if len(offers) == 0 {
		return
	}
	timeout := time.Duration(x.HandoverTimeout)
	pid, errs, err := handover.Spawn(x.handoverDir, timeout, offers)
	if err != nil {
		x.Log.Warnf("handover: %v; releasing every interface at once", err)
		return
	}
	for i, ifc := range names {
		if errs[i] != nil {
			x.Log.Warnf("interface %q: not held for handover: %v; released at once", ifc.name, errs[i])
			continue
		}
		x.Log.Infof("interface %q: held for handover, program id %d (process %d; released after %s if no successor takes it over)",
			ifc.name, ifc.prog.ID(), pid, timeout)
	}
}

// takeOver takes the interface over from a stopped instance's holder, in
// place. It reports whether it did, or why it failed for good; when
// nothing is offered, or what is offered cannot be taken, the caller
// attaches afresh.
func (x *XDPDrop) takeOver(ifc *iface, ifindex int) (bool, error) {
	key := handover.Key{NetNS: ifc.netns, Ifindex: ifindex}
	if !handover.Offered(x.handoverDir, key) {
		// managedKeys looks up every interface (each lookup lists them
		// all): only worth it when there is something to take.
		return false, nil
	}
	wait := max(time.Until(x.holderDeadline), minTakeWait)
	t, err := handover.Take(x.handoverDir, key, x.managedKeys(ifc.netns), wait)
	var stuck *handover.StuckError
	if errors.As(err, &stuck) {
		// Reported with the attach's failure: what it holds is in the way.
		ifc.stuck = stuck
		return false, nil
	}
	if err != nil {
		x.Log.Warnf("interface %q: could not take over from a stopped instance: %v", ifc.name, err)
		return false, nil
	}
	if t == nil {
		return false, nil
	}
	handed := bpf.Handed{LinkFD: t.FDs[0], ProgFD: t.FDs[1], CountersFD: t.FDs[2], Fingerprint: t.Fingerprint, MultiBuffer: t.MultiBuffer}
	if len(t.FDs) > handover.FDCount {
		handed.RuleCountersFD, handed.HasRuleCounters = t.FDs[handover.FDCount], true
	}
	prog, continued, err := bpf.Adopt(handed, ifindex, x.mode, x.policy, func() (*bpf.Program, error) {
		prog, _, err := x.load(ifc.name)
		if err == nil && x.singleBufferOnly {
			prog.DisableMultiBuffer()
		}
		return prog, err
	})
	var foreign *bpf.ForeignError
	switch {
	case errors.Is(err, bpf.ErrModeChanged):
		x.logReleased(t.Accept())
		x.Log.Warnf("interface %q: %v: attaching afresh (a moment unfiltered)", ifc.name, err)
		return false, nil
	case errors.As(err, &foreign):
		t.Refuse(err.Error())
		x.Log.Warnf("interface %q: ignored what the handover offered: %v", ifc.name, err)
		return false, nil
	case err != nil:
		t.Refuse(err.Error())
		ifc.err = x.explain(ifc.name, err)
		return true, ifc.err
	}
	x.logReleased(t.Accept())
	x.adopted(ifc, prog, ifindex)
	if continued && x.files.rules != nil {
		// The program kept holds the prefixes its files held then.
		ifc.rulesGen = staleRules
	}
	if fellBack(x.mode, prog) {
		x.Log.Warnf("interface %q: mode = \"auto\" fell back to generic mode (slower): %v", ifc.name, prog.NativeError())
	}
	if continued {
		x.Log.Infof("interface %q: taken over in place, program id %d; counters continue", ifc.name, prog.ID())
	} else {
		x.Log.Infof("interface %q: taken over in place, program id %d (was %d); counters restart from zero: the drop policy, the rules or the program version changed",
			ifc.name, prog.ID(), t.ProgramID)
	}
	x.pinAdopted(ifc.name, prog, continued)
	return true, nil
}

func (x *XDPDrop) adopted(ifc *iface, prog *bpf.Program, ifindex int) {
	ifc.prog = prog
	ifc.ifindex = ifindex
	ifc.rulesGen = x.files.gen
	ifc.err = nil
	ifc.reported = ""
}

// pinAdopted pins what pin_path and keep_attached ask for: the handed-over
// program may have run without them.
func (x *XDPDrop) pinAdopted(name string, prog *bpf.Program, continued bool) {
	if x.PinPath == "" {
		return
	}
	dir, err := x.pinDir(name)
	if err != nil {
		x.Log.Warnf("interface %q: taken over without pins, so counters restart at every restart: %v", name, err)
		return
	}
	if continued {
		if err := prog.PinCounters(dir); err != nil {
			x.Log.Warnf("interface %q: %v", name, err)
		}
	}
	if x.KeepAttached {
		if err := prog.PinLink(dir); err != nil {
			x.Log.Warnf("interface %q: %v", name, err)
		}
	}
}

func (x *XDPDrop) logReleased(names []string) {
	for _, n := range names {
		x.Log.Infof("interface %q: released at once by the stopped instance's handover: this instance does not manage it", n)
	}
}

// managedKeys names every tracked interface that exists, for the holder to
// release the ones this instance does not manage.
func (x *XDPDrop) managedKeys(netns uint64) []handover.Key {
	var keys []handover.Key
	for _, ifc := range x.ifaces {
		if dev, err := net.InterfaceByName(ifc.name); err == nil {
			keys = append(keys, handover.Key{NetNS: netns, Ifindex: dev.Index})
		}
	}
	return keys
}

// stuckError explains an attach that failed because a holder that did not
// answer still holds the interface.
func stuckError(name string, err error, stuck *handover.StuckError) error {
	if stuck.PID == 0 {
		return fmt.Errorf("interface %q: %w; %v: let it run or end it (it is not visible from here), and this instance takes the interface over or attaches afresh at the next gather", name, err, stuck)
	}
	return fmt.Errorf("interface %q: %w; %v: kill -CONT %d lets this instance take the interface over in place at the next gather, kill -KILL %d releases it at once",
		name, err, stuck, stuck.PID, stuck.PID)
}

// awaitOffer waits, during Start only, for a stopping instance that still
// holds the interface to offer it; it reports whether one did.
func (x *XDPDrop) awaitOffer(ifc *iface, ifindex int) bool {
	if !x.starting {
		return false
	}
	key := handover.Key{NetNS: ifc.netns, Ifindex: ifindex}
	for time.Now().Before(x.holderDeadline) {
		if handover.Offered(x.handoverDir, key) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
