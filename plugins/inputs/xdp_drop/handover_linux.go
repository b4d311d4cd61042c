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

// handover sets want up to take over what a stopped instance's holder
// offers for the interface, in place: offered now, or, when an xdp_drop
// program is in the way during Start, offered before startWait runs out.
func (x *XDPDrop) handover(want *bpf.Want, ifc *iface) {
	key := handover.Key{NetNS: ifc.netns, Ifindex: want.Ifindex}
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
	wait := max(time.Until(x.holderDeadline), minTakeWait)
	t, err := handover.Take(x.handoverDir, key, x.managedKeys(ifc.netns), wait)
	var stuck *handover.StuckError
	if errors.As(err, &stuck) {
		// Reported with the attach's failure: what it holds is in the way.
		ifc.stuck = stuck
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
