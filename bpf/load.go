//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"strings"
	"sync"

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

// memlock raises RLIMIT_MEMLOCK once, and only on kernels that charge BPF
// memory to it (before 5.11); later kernels charge the memory cgroup.
var memlock = sync.OnceValue(rlimit.RemoveMemlock)

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
	if in.rules.count == 0 && !in.policy.Bans.On {
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
		return fmt.Errorf("load XDP program: %w", ErrPermission)
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
