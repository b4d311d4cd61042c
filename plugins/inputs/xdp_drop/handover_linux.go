//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf"
	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// handoff is the instance's side of handover: where its sockets are, and
// the waits of one Start or gather on stopping instances and their holders.
type handoff struct {
	// dir holds this instance's handover sockets; note says why it is not
	// in the preferred place, for a warning at start.
	dir  string
	note string
	// deadline bounds the waits of one Start or gather on stopping
	// instances and their holders; starting is set during Start, the only
	// place that waits for an instance to offer what it still holds.
	deadline time.Time
	starting bool
	// rulesTaken: the rule maps a stopped instance offered were taken
	// (or asked for), once for all interfaces.
	rulesTaken bool
}

// handoffOf places the handover sockets of the named instance.
func handoffOf(instance string) *handoff {
	dir, note := handover.Dir()
	return &handoff{dir: handover.InstanceDir(dir, instance), note: note}
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

// beginStart bounds the waits of a Start, and lets it wait for a stopping
// instance's offers until the returned func is called.
func (h *handoff) beginStart() (done func()) {
	h.deadline = time.Now().Add(startWait)
	h.starting = true
	return func() { h.starting = false }
}

// beginGather bounds the waits of a gather.
func (h *handoff) beginGather() {
	h.deadline = time.Now().Add(gatherWait)
}

// prepare makes the handover directory at start, so that a stop does not
// find it unusable only when a reload needs it.
func (h *handoff) prepare(log telegraf.Logger, timeout time.Duration) {
	if timeout == 0 {
		return
	}
	if h.note != "" {
		log.Warnf("handover: %s; until then the handover sockets are in %s, where another user could take the name first and so refuse every handover", h.note, h.dir)
	}
	if err := handover.Prepare(h.dir); err != nil {
		log.Errorf("handover: %v: a stop could not hand the interfaces over, so every reload would leave them unfiltered for a moment and restart their counters; "+
			"fix the directory, or set RUNTIME_DIRECTORY (systemd: RuntimeDirectory=) to one this user owns, or set handover_timeout = \"0s\" to detach on stop", err)
	}
}

// handOver gives the attached interfaces to a holder process that keeps
// them for timeout, for a successor to take over in place; a link pinned
// for keep_attached needs no holder. It does not release them here: Stop
// closes this process's copies as usual. in is the instance's kernel side,
// nil when none was made.
func (h *handoff) handOver(log telegraf.Logger, timeout time.Duration, ifaces []*iface, in *bpf.Instance) {
	offers, names := handoverOffers(ifaces, in)
	if len(offers) == 0 {
		return
	}
	pid, errs, err := handover.Spawn(h.dir, timeout, offers)
	if err != nil {
		log.Warnf("handover: %v; releasing every interface at once", err)
		return
	}
	for i, ifc := range names {
		if ifc == nil {
			if errs[i] != nil {
				log.Warnf("handover: the rule maps are not held for the successor: %v; it loads its own", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			log.Warnf("interface %s: not held for handover: %v; released at once", quote.Value(ifc.name), errs[i])
			continue
		}
		log.Infof("interface %s: held for handover, program id %d (process %d; released after %s if no successor takes it over)",
			quote.Value(ifc.name), ifc.prog.ID(), pid, timeout)
	}
}

// handoverOffers are what a stop hands over: the attached interfaces, each
// with its interface, and first, when there are rules, the rule maps their
// programs share (in's), once (with a nil interface).
func handoverOffers(ifaces []*iface, in *bpf.Instance) ([]handover.Offer, []*iface) {
	var offers []handover.Offer
	var names []*iface
	for _, ifc := range ifaces {
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
	if len(offers) == 0 || in == nil {
		return offers, names
	}
	// Offered first, so that it is there whenever an interface is.
	if fds, describe := in.RuleMapsToHand(); len(fds) > 0 {
		shared := handover.Offer{Header: handover.Header{Key: handover.SharedKey, Fingerprint: describe}, FDs: fds}
		offers = append([]handover.Offer{shared}, offers...)
		names = append([]*iface{nil}, names...)
	}
	return offers, names
}

// taker is what taking over needs of links: its logger, its tracked
// interfaces and its kernel side (made on first use).
type taker struct {
	log      telegraf.Logger
	ifaces   []*iface
	instance func() *bpf.Instance
}

// want sets want up to take over what a stopped instance's holder offers
// for the interface, in place: offered now, or, when an xdp_drop program is
// in the way during Start, offered before startWait runs out.
func (h *handoff) want(want *bpf.Want, ifc *iface, tk taker) {
	key := handover.Key{NetNS: ifc.netns, Ifindex: want.Ifindex}
	// Whichever interface comes first, handed over or new: the instance
	// adopts the rule maps before it loads any of its own.
	h.takeRules(tk)
	// An offer found here is tried now; waiting for one again would only
	// retry what it refused, load after load.
	await := !handover.Offered(h.dir, key)
	want.Handed = h.take(ifc, key, tk)
	want.AwaitHanded = func() (bool, *bpf.Handed) {
		if !await || !h.awaitOffer(key) {
			return false, nil
		}
		handed := h.take(ifc, key, tk)
		await = !handover.Offered(h.dir, key)
		return true, handed
	}
}

// take takes what the holder offers for key, nil when nothing is offered
// or it could not be taken. The holder is answered when Acquire settles.
func (h *handoff) take(ifc *iface, key handover.Key, tk taker) *bpf.Handed {
	if !handover.Offered(h.dir, key) {
		// managedKeys looks up every interface (each lookup lists them
		// all): only worth it when there is something to take.
		return nil
	}
	// Before the interface: the holder lets the rule maps go with the last
	// (a stopping instance may have offered both only now).
	h.takeRules(tk)
	wait := max(time.Until(h.deadline), minTakeWait)
	t, err := handover.Take(h.dir, key, managedKeys(tk.ifaces, ifc.netns), wait)
	var stuck *handover.StuckError
	if errors.As(err, &stuck) {
		// Reported with the attach's failure: what it holds is in the way.
		ifc.stuck = stuck
		return nil
	}
	if errors.Is(err, handover.ErrHolderGone) {
		tk.log.Infof("interface %s: %v; attaching afresh", quote.Value(ifc.name), err)
		return nil
	}
	if err != nil {
		tk.log.Warnf("interface %s: could not take over from a stopped instance: %v", quote.Value(ifc.name), err)
		return nil
	}
	if t == nil {
		return nil
	}
	handed := bpf.HandedFrom(t.FDs)
	handed.Fingerprint, handed.MultiBuffer, handed.ProgramID = t.Fingerprint, t.MultiBuffer, ebpf.ProgramID(t.ProgramID)
	handed.Settle = func(accept bool, refusal string) {
		if accept {
			logReleased(tk.log, t.Accept())
			return
		}
		t.Refuse(refusal)
	}
	return handed
}

// takeRules takes, once, the rule maps a stopped instance's holder offers
// for all its interfaces, and gives them to the instance: when they hold
// its rules, its programs share them with those taken over, one set in all.
func (h *handoff) takeRules(tk taker) {
	if h.rulesTaken || !handover.Offered(h.dir, handover.SharedKey) {
		return
	}
	h.rulesTaken = true // a holder that did not answer is not asked again
	wait := max(time.Until(h.deadline), minTakeWait)
	// A holder about to listen is asked again within the wait; a dead one
	// is not waited for.
	o, err := handover.TakeShared(h.dir, wait)
	if errors.Is(err, handover.ErrHolderGone) {
		tk.log.Infof("handover: the stopped instance's rule maps: %v; this instance loads its own", err)
		return
	}
	if err != nil {
		tk.log.Warnf("handover: could not take the stopped instance's rule maps: %v; this instance loads its own", err)
		return
	}
	if o == nil {
		return
	}
	if adopted, why := tk.instance().AdoptRules(bpf.RulesHandedFrom(o.FDs, o.Fingerprint)); adopted {
		tk.log.Infof("handover: taken over the stopped instance's rule maps: every interface's program shares them")
	} else {
		tk.log.Infof("handover: not taken over the stopped instance's rule maps: %s", why)
	}
}

func logReleased(log telegraf.Logger, names []string) {
	for _, n := range names {
		log.Infof("interface %s: released at once by the stopped instance's handover: this instance does not manage it", quote.Value(n))
	}
}

// managedKeys names every tracked interface that exists, for the holder to
// release the ones this instance does not manage.
func managedKeys(ifaces []*iface, netns uint64) []handover.Key {
	var keys []handover.Key
	for _, ifc := range ifaces {
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
		return fmt.Errorf("interface %s: %w; %v: let it run or end it (it is not visible from here), and this instance takes the interface over or attaches afresh at the next gather", quote.Value(name), err, stuck)
	}
	return fmt.Errorf("interface %s: %w; %v: kill -CONT %d lets this instance take the interface over in place at the next gather, kill -KILL %d releases it at once",
		quote.Value(name), err, stuck, stuck.PID, stuck.PID)
}

// awaitOffer waits, during Start only, for a stopping instance that still
// holds the interface to offer it; it reports whether one did.
func (h *handoff) awaitOffer(key handover.Key) bool {
	if !h.starting {
		return false
	}
	for time.Now().Before(h.deadline) {
		if handover.Offered(h.dir, key) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
