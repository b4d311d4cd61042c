//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// objects are what one load of an interface's program gives: one variant
// of the program, put under the name xdp_drop (see loadVariant), and the
// counters it updates; cilium/ebpf loads only what is assigned. The rule
// maps are the instance's (ruleMaps).
type objects struct {
	Prog         *ebpf.Program `ebpf:"xdp_drop"`
	Counters     *ebpf.Map     `ebpf:"counters"`
	RuleCounters *ebpf.Map     `ebpf:"rule_counters"` // nil without rules
}

func (o *objects) Close() error {
	err := o.Prog.Close()
	for _, m := range o.maps() {
		err = errors.Join(err, m.Close())
	}
	return err
}

// maps are the program's own maps by their names in the ELF.
func (o *objects) maps() map[string]*ebpf.Map {
	all := map[string]*ebpf.Map{xdpDropMapCounters: o.Counters}
	if o.RuleCounters != nil {
		all[xdpDropMapRuleCounters] = o.RuleCounters
	}
	return all
}

// memlock makes room for BPF memory once, and only on kernels that charge
// it to RLIMIT_MEMLOCK (before 5.11); later kernels charge the memory cgroup
// and nothing changes.
var memlock = sync.OnceValue(func() error { return raiseMemlock(rlimit.RemoveMemlock) })

// memlockHard is the hard RLIMIT_MEMLOCK that BPF memory stays within when
// it could not be lifted (no CAP_SYS_RESOURCE); 0 when it was or need not be.
var memlockHard atomic.Uint64

// raiseMemlock lifts RLIMIT_MEMLOCK with remove (to unlimited, which needs
// CAP_SYS_RESOURCE: root may lack it in its bounding set, the package does
// not grant it). Refused, it raises the soft limit to the hard one, which
// needs no capability, and BPF memory is bounded by that.
func raiseMemlock(remove func() error) error {
	err := remove()
	if !errors.Is(err, unix.EPERM) {
		return err
	}
	var lim unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_MEMLOCK: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := unix.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &raised, nil); err != nil {
			return fmt.Errorf("raise RLIMIT_MEMLOCK to its hard limit %d: %w", lim.Max, err)
		}
	}
	if lim.Max != unix.RLIM_INFINITY {
		memlockHard.Store(lim.Max)
	}
	return nil
}

// errPermission is ErrPermission, with the hard RLIMIT_MEMLOCK when BPF
// memory is bounded by it: the kernel refuses a map over it with EPERM too.
func errPermission() error {
	if hard := memlockHard.Load(); hard > 0 {
		return fmt.Errorf("%w, or more BPF memory than RLIMIT_MEMLOCK allows: this kernel (before 5.11) charges it there, and without CAP_SYS_RESOURCE "+
			"it stays at the hard limit, %d bytes; raise the hard limit of the process that starts the binary (systemd: LimitMEMLOCK=infinity)", ErrPermission, hard)
	}
	return ErrPermission
}

func memlockError(err error) error {
	if errors.Is(err, unix.EPERM) {
		// Without CAP_BPF the probe for memcg accounting fails too.
		return fmt.Errorf("load XDP program: %w", ErrPermission)
	}
	return fmt.Errorf("raise RLIMIT_MEMLOCK for BPF maps (kernel before 5.11): %w", err)
}

// load loads a program of the instance from spec, with fresh counters
// unless counters (by map name) are given, on the instance's rule maps.
func (in *Instance) load(spec *ebpf.CollectionSpec, counters map[string]*ebpf.Map) (*Program, error) {
	if err := memlock(); err != nil {
		return nil, memlockError(err)
	}
	shared, err := in.shared()
	if err != nil {
		return nil, err
	}
	p, err := in.newProgram()
	if err != nil {
		return nil, err
	}
	replace := shared.byName()
	for name, m := range counters {
		replace[name] = m
	}
	if err := p.addBanMaps(in, spec, replace); err != nil {
		return nil, err
	}
	if p.samples, err = newSampleMaps(spec, in.policy.Sample); err != nil {
		return nil, err
	}
	for name, m := range p.samples.byName() {
		replace[name] = m
	}
	objs, err := loadVariant(spec, false, replace)
	if err != nil {
		p.samples.Close()
		p.closeBanCounters()
		return nil, err
	}
	p.objs = objs
	if !in.hasRuleCounters() {
		// Not used by the program without rules: it costs no descriptor
		// (FDsPerInterface).
		p.objs.RuleCounters.Close()
		p.objs.RuleCounters = nil
	}
	if p.id, err = programID(objs.Prog); err != nil {
		p.objs.Close()
		p.samples.Close()
		p.closeBanCounters()
		return nil, err
	}
	return p, nil
}

// newProgram makes a Program of the instance, without objects.
func (in *Instance) newProgram() (*Program, error) {
	rules, err := in.compiled()
	if err != nil {
		return nil, err
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	p := &Program{in: in, slots: in.policy.queueSlots(), perCPU: make([]xdpDropCounterBlock, cpus)}
	if rules.count > 0 || in.policy.Bans.On {
		p.perCPURules = make([]xdpDropRuleBlock, cpus)
	}
	for c, v := range in.policy.verdicts() {
		p.own[c] = v & 1
	}
	return p, nil
}

// loadVariant loads the single-buffer or the multi-buffer program of spec
// with the maps in replace in place of its own.
func loadVariant(spec *ebpf.CollectionSpec, multiBuffer bool, replace map[string]*ebpf.Map) (objects, error) {
	if multiBuffer {
		// A view of spec with the multi-buffer program under the name
		// objects assigns; loading leaves the specs as they are.
		view := *spec
		view.Programs = map[string]*ebpf.ProgramSpec{xdpDropProgXdpDrop: spec.Programs[xdpDropProgXdpDropFrags]}
		spec = &view
	}
	var o objects
	var opts *ebpf.CollectionOptions
	if len(replace) > 0 {
		opts = &ebpf.CollectionOptions{MapReplacements: replace}
	}
	if err := spec.LoadAndAssign(&o, opts); err != nil {
		return o, loadError(err)
	}
	return o, nil
}

// loadError says why a load failed, in the terms this package's callers
// branch on.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && strings.Contains(fmt.Sprintf("%+v", ve), "prohibited for !root") {
		return fmt.Errorf("load XDP program: %w", ErrPermission)
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("load XDP program: %w", errPermission())
	}
	if fdErr := errOutOfFDs(); fdErr != nil {
		// Not the verifier's or the kernel's doing, whatever err says.
		return fmt.Errorf("load XDP program: %w", fdErr)
	}
	if errors.Is(err, unix.EMFILE) {
		return fmt.Errorf("load XDP program: %w", err)
	}
	if ve != nil {
		return fmt.Errorf("load XDP program: %w", verifierLog{ve})
	}
	return fmt.Errorf("load XDP program: %w", err)
}

// verifierLog is the verifier's refusal with its whole log in the text,
// still a *ebpf.VerifierError to errors.As. A named field, not embedded: an
// embedded one would lend its Format, which prints the log cut short.
type verifierLog struct{ err *ebpf.VerifierError }

func (e verifierLog) Error() string { return fmt.Sprintf("%+v", e.err) }
func (e verifierLog) Unwrap() error { return e.err }

func programID(prog *ebpf.Program) (ebpf.ProgramID, error) {
	info, err := prog.Info()
	if err != nil {
		return 0, fmt.Errorf("read XDP program info: %w", err)
	}
	id, _ := info.ID()
	return id, nil
}
