//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Handed is what a stopping instance handed over for one interface: the
// descriptors Program.Handed gave, and what its handover said of them.
type Handed struct {
	fds []int // link, program, counters, and rule counters with rules
	// Fingerprint, MultiBuffer and ProgramID are the handed-over program's,
	// as the stopping instance told them.
	Fingerprint string
	MultiBuffer bool // which its kernel info does not tell
	ProgramID   ebpf.ProgramID
	// Settle, when set, answers the handover once Acquire has decided and
	// before it attaches anything afresh: accept lets the stopped
	// instance's copies go (taken over, or in a mode that cannot serve);
	// otherwise refusal says why they were not taken.
	Settle func(accept bool, refusal string)
}

// Handed returns the descriptors to hand over for p, in the order
// HandedFrom reads them; they stay owned by p.
func (p *Program) Handed() ([]int, error) {
	l, prog, counters, err := p.FDs()
	if err != nil {
		return nil, err
	}
	fds := []int{l, prog, counters}
	if p.objs.RuleCounters != nil {
		fds = append(fds, p.objs.RuleCounters.FD())
	}
	return fds, nil
}

// HandedFrom makes the descriptors a successor received, as Handed gave
// them, a Handed. It owns them from then on: Acquire keeps them or closes
// them.
func HandedFrom(fds []int) *Handed { return &Handed{fds: fds} }

// FDs returns the descriptors of the attachment, the program and its
// counters; they stay owned by p. Handed gives all a handover passes.
func (p *Program) FDs() (linkFD, progFD, countersFD int, err error) {
	raw, ok := p.link.(interface{ FD() int })
	if p.link == nil || !ok {
		return 0, 0, 0, errors.New("not attached")
	}
	return raw.FD(), p.objs.Prog.FD(), p.objs.Counters.FD(), nil
}

// settle answers the handover, when it asks to be.
func (h *Handed) settle(accept bool, refusal string) {
	if h.Settle != nil {
		h.Settle(accept, refusal)
	}
}

// ForeignError says a handed-over descriptor is not what a successor may
// take: an xdp_drop XDP link on the interface it manages.
type ForeignError struct{ Reason string }

func (e *ForeignError) Error() string {
	return "not an xdp_drop attachment of this interface: " + e.Reason
}

// ErrModeChanged says the handed-over link is in a mode the configuration
// does not allow; the link cannot change mode.
var ErrModeChanged = errors.New("the attachment is in another XDP mode")

// handedObjects are the handed-over descriptors made objects.
type handedObjects struct {
	link         link.Link
	prog         *ebpf.Program
	counters     *ebpf.Map
	ruleCounters *ebpf.Map // nil without rules
}

func (o *handedObjects) close() {
	o.link.Close()
	o.prog.Close()
	o.counters.Close()
	if o.ruleCounters != nil {
		o.ruleCounters.Close()
	}
}

// takeOver takes over the attachment handed over for w.Ifindex, in place:
// the same link keeps the interface filtered throughout. When the
// handed-over program has the instance's fingerprint it is kept with its
// counters (continued); otherwise a program loaded as for a fresh attach
// replaces it atomically on the link. A program that samples is replaced
// so too, by one on the same counters (continued): its ring has no reader
// here. It owns h's descriptors: on any
// error they are closed, and a *ForeignError says they were not an
// xdp_drop attachment of this interface.
func (in *Instance) takeOver(w Want, h *Handed, got *Got) (p *Program, continued bool, err error) {
	o, err := wrapHanded(h.fds)
	if err != nil {
		return nil, false, err
	}
	owned := true
	defer func() {
		if owned {
			o.close()
		}
	}()
	id, err := verifyHanded(o, w.Ifindex)
	if err != nil {
		return nil, false, err
	}
	cur, err := handedMode(w.Ifindex, id, w.Mode)
	if err != nil {
		return nil, false, err
	}
	spec, err := in.spec()
	if err != nil {
		return nil, false, err
	}
	same := h.Fingerprint == in.fingerprint && in.continuable(spec, o.counters, o.ruleCounters)
	if same && in.policy.Sample.On() {
		// A fresh program on the same counters, with a ring of its own.
		counters := map[string]*ebpf.Map{xdpDropMapCounters: o.counters}
		if o.ruleCounters != nil {
			counters[xdpDropMapRuleCounters] = o.ruleCounters
		}
		p, err = in.load(spec, counters)
		continued = true
	} else if same {
		p, err := in.newProgram()
		if err != nil {
			return nil, false, err
		}
		// The handed-over program holds its rule maps: the instance's
		// when it adopted those handed over (AdoptRules); a variant loaded
		// later uses the instance's.
		p.objs = objects{Prog: o.prog, Counters: o.counters, RuleCounters: o.ruleCounters}
		p.id, p.multiBuffer = id, h.MultiBuffer
		p.inherit(o.link, cur, w.Mode, "handed-over")
		owned = false
		return p, true, nil
	}
	if !continued {
		p, _, err = in.loadFor(w, got)
	}
	if err != nil {
		return nil, false, err
	}
	// As for a kept link: the multi-buffer variant where the device needs it.
	if err := p.update(o.link, cur); err != nil {
		p.Close()
		return nil, false, fmt.Errorf("replace the program of the handed-over link: %w", err)
	}
	p.inherit(o.link, cur, w.Mode, "handed-over")
	o.link = nil
	owned = false
	o.prog.Close()
	o.counters.Close()
	if o.ruleCounters != nil {
		o.ruleCounters.Close()
	}
	return p, continued, nil
}

// continuable reports whether handed-over counters fit the program of spec
// and the instance's policy: rule counters with rules or bans, none without.
func (in *Instance) continuable(spec *ebpf.CollectionSpec, counters, ruleCounters *ebpf.Map) bool {
	if spec.Maps[xdpDropMapCounters].Compatible(counters) != nil {
		return false
	}
	if !in.hasRuleCounters() || ruleCounters == nil {
		return !in.hasRuleCounters() && ruleCounters == nil
	}
	return spec.Maps[xdpDropMapRuleCounters].Compatible(ruleCounters) == nil
}

// hasRuleCounters reports whether the instance's programs keep rule
// counters: with rules, and with bans, which count the frames they drop
// there against their class's action (sizeCounters).
func (in *Instance) hasRuleCounters() bool {
	return in.rules.count > 0 || in.policy.Bans.On
}

func wrapHanded(fds []int) (*handedObjects, error) {
	if len(fds) < 3 || len(fds) > 4 {
		for _, fd := range fds {
			closeFD(fd)
		}
		return nil, &ForeignError{Reason: fmt.Sprintf("%d descriptors, not 3 or 4", len(fds))}
	}
	o := &handedObjects{}
	var lerr, perr, merr, rerr error
	o.link, lerr = link.NewFromFD(fds[0])
	o.prog, perr = ebpf.NewProgramFromFD(fds[1])
	o.counters, merr = ebpf.NewMapFromFD(fds[2])
	if len(fds) == 4 {
		o.ruleCounters, rerr = ebpf.NewMapFromFD(fds[3])
	}
	if lerr == nil && perr == nil && merr == nil && rerr == nil {
		return o, nil
	}
	if o.link != nil {
		o.link.Close()
	}
	if o.prog != nil {
		o.prog.Close()
	}
	if o.counters != nil {
		o.counters.Close()
	}
	if o.ruleCounters != nil {
		o.ruleCounters.Close()
	}
	// A descriptor that was not wrapped is closed already: cilium/ebpf's
	// constructors own the descriptor they are given, and close it when it
	// is not what they make. Closing it again could close what another
	// goroutine has opened under the number meanwhile.
	var reasons []string
	for _, err := range []error{lerr, perr, merr, rerr} {
		if err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	return nil, &ForeignError{Reason: strings.Join(reasons, "; ")}
}

// verifyHanded checks that the link is an XDP link on ifindex running the
// program, an XDP program named xdp_drop that uses the counters (and rule
// counters, when handed over), and returns the program's id.
func verifyHanded(o *handedObjects, ifindex int) (ebpf.ProgramID, error) {
	info, err := o.link.Info()
	if err != nil {
		return 0, &ForeignError{Reason: fmt.Sprintf("read link info: %v", err)}
	}
	xdp := info.XDP()
	if info.Type != link.XDPType || xdp == nil {
		return 0, &ForeignError{Reason: fmt.Sprintf("link %d is not an XDP link", info.ID)}
	}
	if int(xdp.Ifindex) != ifindex {
		return 0, &ForeignError{Reason: fmt.Sprintf("link %d is on interface index %d, not %d", info.ID, xdp.Ifindex, ifindex)}
	}
	pinfo, err := o.prog.Info()
	if err != nil {
		return 0, &ForeignError{Reason: fmt.Sprintf("read program info: %v", err)}
	}
	id, _ := pinfo.ID()
	if pinfo.Type != ebpf.XDP || pinfo.Name != ProgramName {
		return 0, &ForeignError{Reason: fmt.Sprintf("program %d is %s %s, not XDP %s", id, pinfo.Type, quote.Value(pinfo.Name), quote.Value(ProgramName))}
	}
	if info.Program != id {
		return 0, &ForeignError{Reason: fmt.Sprintf("link %d runs program %d, not the handed-over program %d", info.ID, info.Program, id)}
	}
	if !usesMap(pinfo, o.counters) {
		return 0, &ForeignError{Reason: fmt.Sprintf("program %d does not use the handed-over counters", id)}
	}
	if o.ruleCounters != nil && !usesMap(pinfo, o.ruleCounters) {
		return 0, &ForeignError{Reason: fmt.Sprintf("program %d does not use the handed-over rule counters", id)}
	}
	return id, nil
}

func usesMap(pinfo *ebpf.ProgramInfo, m *ebpf.Map) bool {
	minfo, err := m.Info()
	if err != nil {
		return false
	}
	want, _ := minfo.ID()
	ids, ok := pinfo.MapIDs()
	if !ok {
		return true // the kernel does not say (before 4.15): the peer's uid was checked
	}
	for _, id := range ids {
		if id == want {
			return true
		}
	}
	return false
}

// handedMode returns the mode program id is attached in on ifindex, or
// ErrModeChanged when mode does not allow it.
func handedMode(ifindex int, id ebpf.ProgramID, mode Mode) (Mode, error) {
	onIface, cur, err := modeOn(ifindex)
	if err != nil {
		return "", err
	}
	if onIface != id {
		return "", &ForeignError{Reason: fmt.Sprintf("interface index %d runs program %d, not %d", ifindex, onIface, id)}
	}
	if allows(mode, cur) {
		return cur, nil
	}
	return cur, fmt.Errorf("%w: %s, configured %s", ErrModeChanged, cur, mode)
}
