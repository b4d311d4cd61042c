//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Fingerprint names the program build and the policy that define the
// meaning of the counters: counters of another fingerprint must not be
// continued.
func (p *Program) Fingerprint() string { return p.fingerprint }

// FDs returns the descriptors of the attachment, the program and its
// counters, for handing over; they stay owned by p. A program with rules
// hands over RuleCountersFD too.
func (p *Program) FDs() (linkFD, progFD, countersFD int, err error) {
	raw, ok := p.link.(interface{ FD() int })
	if p.link == nil || !ok {
		return 0, 0, 0, errors.New("not attached")
	}
	return raw.FD(), p.objs.Prog.FD(), p.objs.Counters.FD(), nil
}

// CountersFD returns the descriptor of the program's counters, owned by p.
func (p *Program) CountersFD() int { return p.objs.Counters.FD() }

// RuleCountersFD returns the descriptor of the program's rule counters,
// owned by p; ok is false for a program without rules, which holds none.
func (p *Program) RuleCountersFD() (fd int, ok bool) {
	if p.objs.RuleCounters == nil {
		return 0, false
	}
	return p.objs.RuleCounters.FD(), true
}

// ForeignError says a handed-over descriptor is not what a successor may
// take: an xdp_drop XDP link on the interface it manages.
type ForeignError struct{ Reason string }

func (e *ForeignError) Error() string {
	return "not an xdp_drop attachment of this interface: " + e.Reason
}

// ErrModeChanged is returned by Adopt when the handed-over link is in a
// mode the configuration does not allow; the link cannot change mode.
var ErrModeChanged = errors.New("the attachment is in another XDP mode")

// Handed is what a stopping instance handed over for one interface.
type Handed struct {
	LinkFD, ProgFD, CountersFD int
	// RuleCountersFD is the program's rule counters, when HasRuleCounters
	// (a program with rules).
	RuleCountersFD  int
	HasRuleCounters bool
	Fingerprint     string
	// MultiBuffer says the program is the multi-buffer variant, which its
	// kernel info does not tell.
	MultiBuffer bool
}

// Adopt takes over an attachment handed over for ifindex, in place: the
// same link keeps the interface filtered throughout. When the handed-over
// program has the fingerprint policy gives, it is kept with its counters;
// otherwise load provides a program (with fresh counters) that replaces it
// atomically on the link, and continued is false. A program that samples
// is replaced so too, by one on the same counters (continued is true): its
// ring has no reader here. Adopt owns the
// descriptors: on any error they are closed, and a *ForeignError says
// they were not an xdp_drop attachment of this interface.
func Adopt(h Handed, ifindex int, mode Mode, policy Policy, load func() (*Program, error)) (p *Program, continued bool, err error) {
	l, prog, counters, ruleCounters, err := wrapHanded(h)
	if err != nil {
		return nil, false, err
	}
	owned := true
	defer func() {
		if owned {
			l.Close()
			prog.Close()
			counters.Close()
			if ruleCounters != nil {
				ruleCounters.Close()
			}
		}
	}()
	id, err := verifyHanded(l, prog, counters, ruleCounters, ifindex)
	if err != nil {
		return nil, false, err
	}
	cur, err := linkMode(ifindex, id, mode)
	if err != nil {
		return nil, false, err
	}
	spec, rules, err := configuredSpec(policy)
	if err != nil {
		return nil, false, err
	}
	same := h.Fingerprint == policy.fingerprint() && continuable(spec, rules, counters, ruleCounters)
	if same && policy.Sample.On() {
		// A fresh program on the same counters, with a ring of its own.
		continued = true
		load = func() (*Program, error) { return loadOn(spec, policy, rules, counters, ruleCounters) }
	} else if same {
		p, err := newProgram(policy, rules)
		if err != nil {
			return nil, false, err
		}
		// The handed-over program holds its rule maps; a variant loaded
		// later gets maps of its own, filled from these tables.
		p.objs.Prog, p.objs.Counters, p.objs.RuleCounters = prog, counters, ruleCounters
		p.id, p.multiBuffer = id, h.MultiBuffer
		p.adopted(l, cur, mode)
		owned = false
		return p, true, nil
	}
	p, err = load()
	if err != nil {
		return nil, false, err
	}
	// As for a kept link: the multi-buffer variant where the device needs it.
	if err := p.update(l, cur); err != nil {
		p.Close()
		return nil, false, fmt.Errorf("replace the program of the handed-over link: %w", err)
	}
	p.adopted(l, cur, mode)
	owned = false
	prog.Close()
	counters.Close()
	if ruleCounters != nil {
		ruleCounters.Close()
	}
	return p, continued, nil
}

// continuable reports whether handed-over counters fit the program of spec
// and its rules: rule counters with rules, none without.
func continuable(spec *ebpf.CollectionSpec, rules *ruleTables, counters, ruleCounters *ebpf.Map) bool {
	if spec.Maps[xdpDropMapCounters].Compatible(counters) != nil {
		return false
	}
	if rules.count == 0 || ruleCounters == nil {
		return rules.count == 0 && ruleCounters == nil
	}
	return spec.Maps[xdpDropMapRuleCounters].Compatible(ruleCounters) == nil
}

// adopted makes l, attached in mode cur, the attachment of p.
func (p *Program) adopted(l link.Link, cur, configured Mode) {
	p.link, p.mode = l, cur
	if configured == ModeAuto && cur == ModeGeneric {
		p.nativeErr = errors.New("the handed-over attachment is in generic mode, as an earlier run attached it (configured so, or fallen back), and a link keeps its mode: native mode is tried when the interface is attached afresh")
	}
}

func wrapHanded(h Handed) (link.Link, *ebpf.Program, *ebpf.Map, *ebpf.Map, error) {
	l, lerr := link.NewFromFD(h.LinkFD)
	prog, perr := ebpf.NewProgramFromFD(h.ProgFD)
	counters, merr := ebpf.NewMapFromFD(h.CountersFD)
	var ruleCounters *ebpf.Map
	var rerr error
	if h.HasRuleCounters {
		ruleCounters, rerr = ebpf.NewMapFromFD(h.RuleCountersFD)
	}
	if lerr == nil && perr == nil && merr == nil && rerr == nil {
		return l, prog, counters, ruleCounters, nil
	}
	if l != nil {
		l.Close()
	}
	if prog != nil {
		prog.Close()
	}
	if counters != nil {
		counters.Close()
	}
	if ruleCounters != nil {
		ruleCounters.Close()
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
	return nil, nil, nil, nil, &ForeignError{Reason: strings.Join(reasons, "; ")}
}

// verifyHanded checks that l is an XDP link on ifindex running prog, an
// XDP program named xdp_drop that uses counters (and ruleCounters, when
// handed over), and returns the program's id.
func verifyHanded(l link.Link, prog *ebpf.Program, counters, ruleCounters *ebpf.Map, ifindex int) (ebpf.ProgramID, error) {
	info, err := l.Info()
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
	pinfo, err := prog.Info()
	if err != nil {
		return 0, &ForeignError{Reason: fmt.Sprintf("read program info: %v", err)}
	}
	id, _ := pinfo.ID()
	if pinfo.Type != ebpf.XDP || pinfo.Name != ProgramName {
		return 0, &ForeignError{Reason: fmt.Sprintf("program %d is %s %q, not XDP %q", id, pinfo.Type, pinfo.Name, ProgramName)}
	}
	if info.Program != id {
		return 0, &ForeignError{Reason: fmt.Sprintf("link %d runs program %d, not the handed-over program %d", info.ID, info.Program, id)}
	}
	if !usesMap(pinfo, counters) {
		return 0, &ForeignError{Reason: fmt.Sprintf("program %d does not use the handed-over counters", id)}
	}
	if ruleCounters != nil && !usesMap(pinfo, ruleCounters) {
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

// linkMode returns the mode program id is attached in on ifindex, or
// ErrModeChanged when mode does not allow it.
func linkMode(ifindex int, id ebpf.ProgramID, mode Mode) (Mode, error) {
	onIface, attachMode, err := xdpProgramOn(ifindex)
	if err != nil {
		return "", err
	}
	if onIface != id {
		return "", &ForeignError{Reason: fmt.Sprintf("interface index %d runs program %d, not %d", ifindex, onIface, id)}
	}
	cur := map[uint32]Mode{1: ModeNative, 2: ModeGeneric, 3: ModeOffload}[attachMode]
	if mode == cur || mode == ModeAuto && (cur == ModeNative || cur == ModeGeneric) {
		return cur, nil
	}
	return cur, fmt.Errorf("%w: %s, configured %s", ErrModeChanged, cur, mode)
}

// PinCounters pins the counters (and the rule counters of a program with
// rules) in dir under the fingerprint's names, replacing counters pinned
// there under any other, as LoadPinned would have: for an adopted program
// whose counters continue.
func (p *Program) PinCounters(dir string) error {
	pins := p.counterPins()
	same := true
	for _, pin := range pins {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pin.name), nil)
		if err != nil {
			same = false
			break
		}
		same = sameMap(m, pin.m)
		m.Close()
		if !same {
			break
		}
	}
	if same {
		return nil
	}
	if _, err := removeCounterPins(dir, nil); err != nil {
		return err
	}
	for _, pin := range pins {
		path := filepath.Join(dir, pin.name)
		if err := pin.m.Pin(path); err != nil {
			return fmt.Errorf("pin %s at %s: %w", pin.what, path, err)
		}
	}
	return nil
}

// counterPin is a counter map of p and the name it is pinned under.
type counterPin struct {
	name, what string
	m          *ebpf.Map
}

// counterPins are the maps a pin keeps of p: its counters, and its rule
// counters when it has rules.
func (p *Program) counterPins() []counterPin {
	pins := []counterPin{{countersPin + p.fingerprint, "counters", p.objs.Counters}}
	if p.objs.RuleCounters != nil {
		pins = append(pins, counterPin{ruleCountersPin + p.fingerprint, "rule counters", p.objs.RuleCounters})
	}
	return pins
}

func sameMap(a, b *ebpf.Map) bool {
	ai, err1 := a.Info()
	bi, err2 := b.Info()
	if err1 != nil || err2 != nil {
		return false
	}
	aid, _ := ai.ID()
	bid, _ := bi.ID()
	return aid == bid
}

// PinLink pins the attachment in dir, as keep_attached does, replacing a
// link kept there before.
func (p *Program) PinLink(dir string) error {
	if _, err := ReleaseKept(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, linkPin)
	if err := p.link.Pin(path); err != nil {
		return fmt.Errorf("pin link at %s: %w", path, err)
	}
	return nil
}
