//go:build linux

package xdp_drop

import (
	"net"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
)

func handoverDir() string { return handover.Dir() }

// offerWait is how long Start waits for a stopping instance, found still
// attached to an interface this one manages, to offer it for handover.
const offerWait = 2 * time.Second

// handOver gives the attached interfaces to a holder process that keeps
// them for handover_timeout, for a successor to take over in place; a link
// pinned for keep_attached needs no holder. It does not release them here:
// Stop closes this process's copies as usual.
func (x *XDPDrop) handOver() {
	var offers []handover.Offer
	var names []*iface
	for _, ifc := range x.ifaces {
		if ifc.prog == nil || ifc.prog.Kept() || ifc.prog.Attached() != nil {
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
// program is in the way during Start, offered within offerWait.
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
	t, err := handover.Take(x.handoverDir, key, x.managedKeys(ifc.netns))
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

// awaitOffer waits, during Start only, for a stopping instance that still
// holds the interface to offer it; it reports whether one did.
func (x *XDPDrop) awaitOffer(key handover.Key) bool {
	if x.offerDeadline.IsZero() {
		return false
	}
	for time.Now().Before(x.offerDeadline) {
		if handover.Offered(x.handoverDir, key) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
