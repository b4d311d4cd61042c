//go:build linux

package bpf

import (
	"errors"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Program is one loaded copy of the XDP program with its own counters, on
// its instance's rule maps, attached to at most one interface. It starts as
// the single-buffer program and becomes the multi-buffer one where a device
// needs it (see Attach).
type Program struct {
	in          *Instance
	private     bool // in is the program's own (Load): closed with it
	objs        objects
	multiBuffer bool  // objs.Prog is the multi-buffer (xdp.frags) variant
	nativeErr   error // why native mode was refused, when auto fell back
	link        link.Link
	mode        Mode
	id          ebpf.ProgramID
	perCPU      []xdpDropCounterBlock // one slot of counters, read by lookup
	perCPURules []xdpDropRuleBlock    // one slot of rule_counters; nil without rules
	slots       uint32                // counter blocks: 1, or QueueSlots with per-queue counting
	sums        []Block               // per-CPU sums over queues, reused between reads
	// own is, per class, the action (bit 0) of the frames the counters map
	// counts: the class's own, as the verdict table gives it.
	own [ClassCount]uint8
	// observed is the ifindex of another process's program opened
	// read-only by Observe, 0 for a program of this process.
	observed int
	// samples are the program's sampling maps (sample.go), nil when it
	// does not sample.
	samples *sampleMaps
	// banCounters is the program's ban_counters, nil without bans.
	banCounters *ebpf.Map
	// flowCounters is the program's flowspec_counters, nil without FlowSpec.
	flowCounters *ebpf.Map
}

// ID is the kernel's id of the loaded program, as ip link and bpftool show it.
func (p *Program) ID() ebpf.ProgramID { return p.id }

// Mode is the mode the program is attached in, or "" when it is not attached.
func (p *Program) Mode() Mode { return p.mode }

// XDP returns the program itself, for BPF_PROG_TEST_RUN.
func (p *Program) XDP() *ebpf.Program { return p.objs.Prog }

// NativeError is why native mode was refused when ModeAuto fell back to
// generic mode, nil otherwise.
func (p *Program) NativeError() error { return p.nativeErr }

// Fingerprint names the program build and the policy that define the
// meaning of the counters: counters of another fingerprint must not be
// continued.
func (p *Program) Fingerprint() string { return p.in.fingerprint }

// Kept reports whether the attachment is pinned (KeepAttached), so that
// it outlives the process.
func (p *Program) Kept() bool {
	l, ok := p.link.(interface{ IsPinned() bool })
	return ok && l.IsPinned()
}

// Close detaches the program and releases it and its counters.
func (p *Program) Close() error {
	err := errors.Join(p.Detach(), p.objs.Close(), p.samples.Close(), p.closeBanCounters())
	if p.private {
		err = errors.Join(err, p.in.Close())
	}
	return err
}
