//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"
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
	offers, names := x.handoverOffers()
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
		if ifc == nil {
			if errs[i] != nil {
				x.Log.Warnf("handover: the rule maps are not held for the successor: %v; it loads its own", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			x.Log.Warnf("interface %q: not held for handover: %v; released at once", ifc.name, errs[i])
			continue
		}
		x.Log.Infof("interface %q: held for handover, program id %d (process %d; released after %s if no successor takes it over)",
			ifc.name, ifc.prog.ID(), pid, timeout)
	}
}

// handoverOffers are what a stop hands over: the attached interfaces, each
// with its interface, and first, when there are rules, the rule maps their
// programs share, once (with a nil interface).
func (x *XDPDrop) handoverOffers() ([]handover.Offer, []*iface) {
	var offers []handover.Offer
	var names []*iface
	for _, ifc := range x.ifaces {
		if ifc.prog == nil || ifc.prog.Kept() || ifc.prog.Observed() || ifc.prog.Attached() != nil {
			continue
		}
		fds, err := ifc.prog.Handed()
		if err != nil {
			continue
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
	if len(offers) == 0 || x.kernel.in == nil {
		return offers, names
	}
	// Offered first, so that it is there whenever an interface is.
	if fds, describe := x.kernel.in.RuleMapsToHand(); len(fds) > 0 {
		shared := handover.Offer{Header: handover.Header{Key: handover.SharedKey, Fingerprint: describe}, FDs: fds}
		offers = append([]handover.Offer{shared}, offers...)
		names = append([]*iface{nil}, names...)
	}
	return offers, names
}

// handover sets want up to take over what a stopped instance's holder
// offers for the interface, in place: offered now, or, when an xdp_drop
// program is in the way during Start, offered before startWait runs out.
func (x *XDPDrop) handover(want *bpf.Want, ifc *iface) {
	key := handover.Key{NetNS: ifc.netns, Ifindex: want.Ifindex}
	// Whichever interface comes first, handed over or new: the instance
	// adopts the rule maps before it loads any of its own.
	x.takeRules()
	// An offer found here is tried now; waiting for one again would only
	// retry what it refused, load after load.
	await := !handover.Offered(x.handoverDir, key)
	want.Handed = x.take(ifc, key)
	want.AwaitHanded = func() (bool, *bpf.Handed) {
		if !await || !x.awaitOffer(key) {
			return false, nil
		}
		h := x.take(ifc, key)
		await = !handover.Offered(x.handoverDir, key)
		return true, h
	}
}

// take takes what the holder offers for key, nil when nothing is offered
// or it could not be taken. The holder is answered when Acquire settles.
func (x *XDPDrop) take(ifc *iface, key handover.Key) *bpf.Handed {
	if !handover.Offered(x.handoverDir, key) {
		// managedKeys looks up every interface (each lookup lists them
		// all): only worth it when there is something to take.
		return nil
	}
	// Before the interface: the holder lets the rule maps go with the last
	// (a stopping instance may have offered both only now).
	x.takeRules()
	wait := max(time.Until(x.holderDeadline), minTakeWait)
	t, err := handover.Take(x.handoverDir, key, x.managedKeys(ifc.netns), wait)
	var stuck *handover.StuckError
	if errors.As(err, &stuck) {
		// Reported with the attach's failure: what it holds is in the way.
		ifc.stuck = stuck
		return nil
	}
	if errors.Is(err, handover.ErrHolderGone) {
		x.Log.Infof("interface %q: %v; attaching afresh", ifc.name, err)
		return nil
	}
	if err != nil {
		x.Log.Warnf("interface %q: could not take over from a stopped instance: %v", ifc.name, err)
		return nil
	}
	if t == nil {
		return nil
	}
	h := bpf.HandedFrom(t.FDs)
	h.Fingerprint, h.MultiBuffer, h.ProgramID = t.Fingerprint, t.MultiBuffer, ebpf.ProgramID(t.ProgramID)
	h.Settle = func(accept bool, refusal string) {
		if accept {
			x.logReleased(t.Accept())
			return
		}
		t.Refuse(refusal)
	}
	return h
}

// takeRules takes, once, the rule maps a stopped instance's holder offers
// for all its interfaces, and gives them to the instance: when they hold
// its rules, its programs share them with those taken over, one set in all.
func (x *XDPDrop) takeRules() {
	if x.rulesTaken || !handover.Offered(x.handoverDir, handover.SharedKey) {
		return
	}
	x.rulesTaken = true // a holder that did not answer is not asked again
	wait := max(time.Until(x.holderDeadline), minTakeWait)
	// A holder about to listen is asked again within the wait; a dead one
	// is not waited for.
	o, err := handover.TakeShared(x.handoverDir, wait)
	if errors.Is(err, handover.ErrHolderGone) {
		x.Log.Infof("handover: the stopped instance's rule maps: %v; this instance loads its own", err)
		return
	}
	if err != nil {
		x.Log.Warnf("handover: could not take the stopped instance's rule maps: %v; this instance loads its own", err)
		return
	}
	if o == nil {
		return
	}
	if adopted, why := x.instance().AdoptRules(bpf.RulesHandedFrom(o.FDs, o.Fingerprint)); adopted {
		x.Log.Infof("handover: taken over the stopped instance's rule maps: every interface's program shares them")
	} else {
		x.Log.Infof("handover: not taken over the stopped instance's rule maps: %s", why)
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
func (x *XDPDrop) awaitOffer(key handover.Key) bool {
	if !x.starting {
		return false
	}
	for time.Now().Before(x.holderDeadline) {
		if handover.Offered(x.handoverDir, key) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
