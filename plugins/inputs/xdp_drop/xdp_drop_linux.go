//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/filter"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
)

// iface is one configured or matched interface and, when attached, its program.
type iface struct {
	name     string
	matched  bool   // found by a glob pattern, not named exactly
	missing  bool   // the last attach found no such interface
	ifindex  int    // of the interface the program is attached to
	netns    uint64 // inode of the network namespace it is in, for handover
	prog     *bpf.Program
	err      error  // why it is not attached
	reported string // the last error reported through the accumulator
	counters bpf.Block
	series   seriesLog // the series the gathers emitted, for first-burst zeros
	tap      tap       // its part of the sampling, with sample_rate (sampler_linux.go)
	rulesGen uint64    // the rule prefixes its program holds (prefixLists.gen)
	swapErr  error     // why the last swap to the policy's prefixes failed; nil once one succeeds
	// stuck: the holder offering the interface did not answer, in this attach.
	stuck *handover.StuckError
	// observer names whose program prog is when it was observed (Observe),
	// not attached here; it stays set, so the interface is only observed.
	observer string
	// attachment: how the observed program is attached.
	attachment bpf.Attachment
}

// Start attaches to every configured interface. An interface that fails is
// reported and retried at every gather; it never stops the others.
func (x *XDPDrop) Start(acc telegraf.Accumulator) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.Interfaces) == 0 {
		x.Log.Warnf(`interfaces = []: nothing is attached and nothing is reported; list the interfaces to attach to in the plugin's config, e.g. interfaces = ["eth1"]`)
	}
	x.sampling.openCapture(acc)
	x.handoff.prepare(x.Log, time.Duration(x.HandoverTimeout))
	defer x.handoff.beginStart()()
	err := x.inNamespace(func() error {
		x.discover(acc)
		for _, ifc := range x.ifaces {
			if err := x.attach(ifc); err != nil {
				x.report(acc, ifc, err)
			}
		}
		return nil
	})
	x.namespaceFailed(acc, err)
	x.swapPrefixes(acc)
	x.startSamplers(acc)
	return nil
}

// Gather attaches, releases and swaps what changed since the last gather
// (Reconcile), then emits the counters of every attached interface and the
// link state of every configured one (Snapshot).
func (x *XDPDrop) Gather(acc telegraf.Accumulator) error {
	x.Reconcile(acc)
	snap := x.Snapshot(acc)
	emitSnapshot(acc, &snap)
	return nil
}

// startSamplers starts reading the samples of every attached interface at
// once, rather than at the first gather: the ring holds a quarter of a
// second of events at the cap, a gather interval many times that.
func (x *XDPDrop) startSamplers(acc telegraf.Accumulator) {
	for _, ifc := range x.ifaces {
		if ifc.prog == nil || ifc.observer != "" {
			continue
		}
		if err := x.sampling.start(&ifc.tap, ifc.name, ifc.prog, &ifc.counters); err != nil {
			x.report(acc, ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
		}
	}
}

// Reconcile brings the interfaces to the configuration, as the gather it
// starts: it forgets the interfaces the last snapshot reported gone, reads
// the prefix files again, finds the interfaces patterns match, releases the
// programs the kernel detached, attaches those not attached, swaps the
// programs to the policy's prefixes, starts the samplers and checks the
// capture. What a released program counted waits for the Snapshot that
// follows; errors go to acc, as Gather's do.
func (x *XDPDrop) Reconcile(acc telegraf.Accumulator) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gathers > 0 {
		// Not before the first: an interface missing at Start is still
		// reported by a snapshot.
		x.forgetVanished()
	}
	x.released = Snapshot{}
	x.gathers++
	x.handoff.beginGather()
	x.refreshPrefixFiles(acc)
	err := x.inNamespace(func() error {
		x.discover(acc)
		for _, ifc := range x.ifaces {
			x.releaseDetached(acc, ifc, &x.released, true)
			if ifc.prog == nil {
				if err := x.attach(ifc); err != nil {
					x.report(acc, ifc, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		// Link state needs no namespace: still notice detached programs.
		for _, ifc := range x.ifaces {
			x.releaseDetached(acc, ifc, &x.released, false)
		}
	}
	x.namespaceFailed(acc, err)
	x.swapPrefixes(acc)
	x.sampling.checkCapture(acc)
	x.startSamplers(acc)
}

// Snapshot reads the counters of every attached interface (after what the
// programs the last Reconcile released counted) and the link state of every
// configured one; it attaches, releases and swaps nothing. Errors go to
// acc, as Gather's do.
func (x *XDPDrop) Snapshot(acc telegraf.Accumulator) Snapshot {
	x.mu.Lock()
	defer x.mu.Unlock()
	// Sized as the last one: a gather allocates once per slice.
	snap := Snapshot{Series: make([]Series, 0, max(x.lastSeries, len(x.released.Series))), Links: make([]Link, 0, len(x.ifaces))}
	snap.Series = append(snap.Series, x.released.Series...)
	snap.Rules = append(snap.Rules, x.released.Rules...)
	// One bound for every interface's readers: a gather never waits longer.
	drainBy := time.Now().Add(sampleDrainWait)
	for _, ifc := range x.ifaces {
		first := len(snap.Series)
		var counted []Series
		if x.readSeries(acc, ifc, &snap) {
			counted = snap.Series[first:len(snap.Series):len(snap.Series)]
		}
		l := x.link(ifc)
		// An observed program's ring is its owner's to read: reading it
		// here would take the events away from it.
		if ifc.prog != nil && ifc.observer == "" {
			snap.Top = x.sampling.topSources(&ifc.tap, ifc.prog, ifc.name, counted, &l, snap.Top, drainBy, func(err error) { x.report(acc, ifc, err) })
		}
		snap.Links = append(snap.Links, l)
	}
	x.stampSnapshot(&snap, time.Now())
	x.lastSeries = len(snap.Series)
	return snap
}

// stampSnapshot sets the snapshot's time, at once the time of the gather
// in the interfaces' series logs.
func (x *XDPDrop) stampSnapshot(snap *Snapshot, at time.Time) {
	snap.Time = at
	for _, ifc := range x.ifaces {
		ifc.series.stamp(x.gathers, at)
	}
}

// releaseDetached releases the program of an interface the kernel
// detached it from, after adding what it counted since the last gather to
// snap. inNS says whether the calling thread is in the interfaces'
// namespace, where the interface can be looked up to tell why.
func (x *XDPDrop) releaseDetached(acc telegraf.Accumulator, ifc *iface, snap *Snapshot, inNS bool) {
	if ifc.prog == nil {
		return
	}
	err := ifc.prog.Attached()
	if err == nil {
		return
	}
	x.readSeries(acc, ifc, snap)
	removed := errors.Is(err, bpf.ErrInterfaceGone)
	dev, lookupErr := net.InterfaceByName(ifc.name)
	switch {
	case inNS && removed && lookupErr == nil && dev.Index == ifc.ifindex:
		// The same interface is there: something detached the link itself.
		err = errors.New("its XDP link was detached by another tool")
		removed = false
	case inNS && removed && lookupErr != nil && !lookupFailed(lookupErr):
		// Gone, not recreated: reported once, like any missing interface.
		gone := &notFoundError{name: ifc.name, removedID: ifc.prog.ID()}
		x.release(ifc, gone)
		ifc.missing = true
		x.report(acc, ifc, gone)
		if x.PinPath != "" && ifc.observer == "" {
			x.removePins(ifc.name)
		}
		return
	}
	if ifc.observer != "" {
		x.Log.Infof("interface %q: the observed program id %d is no longer attached: %v; its counters show again once an instance attaches one", ifc.name, ifc.prog.ID(), err)
		x.release(ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
		return
	}
	if removed && ifc.matched {
		// Removed and created again: churn among matched interfaces.
		x.Log.Infof("interface %q: program id %d no longer attached: %v; attaching again", ifc.name, ifc.prog.ID(), err)
	} else {
		x.Log.Warnf("interface %q: program id %d no longer attached: %v; attaching again", ifc.name, ifc.prog.ID(), err)
	}
	x.release(ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
	if removed && x.PinPath != "" && ifc.observer == "" {
		// A new interface of that name starts from zero, like without pins.
		x.removePins(ifc.name)
	}
}

// removePins unpins what the plugin pinned for a removed interface; files
// other tools put in its directory stay, and the log names them.
func (x *XDPDrop) removePins(name string) {
	dir := filepath.Join(x.PinPath, name)
	left, err := bpf.RemovePins(dir)
	if err != nil {
		x.Log.Warnf("interface %q: %v", name, err)
	}
	if len(left) > 0 {
		for i := range left {
			left[i] = tagName(left[i])
		}
		x.Log.Infof("interface %q: unpinned its counters; left %q in place, holding %s that xdp_drop did not pin", name, dir, strings.Join(left, ", "))
	}
}

// namespaceFailed marks every unattached interface with the namespace error.
func (x *XDPDrop) namespaceFailed(acc telegraf.Accumulator, err error) {
	if err == nil {
		x.nsReported = ""
		return
	}
	for _, ifc := range x.ifaces {
		if ifc.prog == nil {
			ifc.err = err
			x.report(acc, ifc, err)
		}
	}
	if len(x.ifaces) == 0 && err.Error() != x.nsReported {
		// Only patterns configured: nothing else carries the error.
		x.nsReported = err.Error()
		acc.AddError(err)
	}
}

// discover adds the interfaces that glob patterns match and that are not
// tracked yet. Loopback is matched only when named exactly.
func (x *XDPDrop) discover(acc telegraf.Accumulator) {
	if x.selector == nil {
		return
	}
	list, err := net.Interfaces()
	if err != nil {
		acc.AddError(fmt.Errorf("list interfaces: %w", err))
		return
	}
	tracked := make(map[string]bool, len(x.ifaces))
	for _, ifc := range x.ifaces {
		tracked[ifc.name] = true
	}
	var added []string
	for _, dev := range list {
		x.hintLiteral(dev.Name)
		if dev.Flags&net.FlagLoopback != 0 || tracked[dev.Name] || !x.selector.Match(dev.Name) {
			continue
		}
		x.ifaces = append(x.ifaces, &iface{name: dev.Name, matched: true})
		added = append(added, tagName(dev.Name))
	}
	if len(added) > 0 {
		x.Log.Debugf("interfaces matched: %s", strings.Join(added, ", "))
	}
}

// hintLiteral warns, once, when an interface is named exactly like a
// pattern of interfaces that does not match it, such as "rt[0]".
func (x *XDPDrop) hintLiteral(name string) {
	if !isPattern(name) || x.literalHint[name] || !slices.Contains(x.Interfaces, name) {
		return
	}
	if f, err := filter.Compile([]string{name}); err == nil && f.Match(name) {
		return
	}
	if x.literalHint == nil {
		x.literalHint = make(map[string]bool)
	}
	x.literalHint[name] = true
	escaped := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(name)
	x.Log.Warnf("interfaces: %q is a glob pattern, which does not match the interface named %q; to name that interface, escape the glob characters: '%s'", name, name, escaped)
}

// forgetVanished releases interfaces found by a pattern that have gone
// away, once their absence has been reported.
func (x *XDPDrop) forgetVanished() {
	kept := x.ifaces[:0]
	for _, ifc := range x.ifaces {
		if ifc.matched && ifc.missing && ifc.prog == nil {
			x.sampling.forget(ifc.name)
			continue // its going was logged when it was found missing
		}
		kept = append(kept, ifc)
	}
	x.ifaces = kept
}

// Stop hands the attached interfaces over to a holder process for
// handover_timeout, then detaches them from this process; with
// keep_attached the pinned links keep the programs attached instead (a
// link that could not be pinned is handed over).
func (x *XDPDrop) Stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.HandoverTimeout > 0 {
		x.handoff.handOver(x.Log, time.Duration(x.HandoverTimeout), x.ifaces, x.kernel.in)
	}
	for _, ifc := range x.ifaces {
		if ifc.prog != nil && ifc.prog.Kept() {
			x.Log.Infof("interface %q: left attached (keep_attached), program id %d", ifc.name, ifc.prog.ID())
		}
		x.release(ifc, errors.New("stopped"))
	}
	x.closeInstance()
	x.sampling.closeCapture()
}

func (x *XDPDrop) release(ifc *iface, why error) {
	if ifc.prog == nil {
		return
	}
	x.sampling.stop(&ifc.tap)
	if err := ifc.prog.Close(); err != nil {
		x.Log.Errorf("interface %q: detach: %v", ifc.name, err)
	}
	ifc.prog = nil
	ifc.err = why
}

// attach gets the interface its program, whatever the route (see
// bpf.Instance.Acquire); on any failure nothing is left attached or loaded.
func (x *XDPDrop) attach(ifc *iface) error {
	dev, err := net.InterfaceByName(ifc.name)
	ifc.missing = err != nil && !lookupFailed(err)
	switch {
	case ifc.missing:
		ifc.err = unknownInterface(ifc.name)
		return ifc.err
	case err != nil:
		ifc.err = x.explain(ifc.name, fmt.Errorf("look up the interface: %w", err))
		return ifc.err
	}
	ifc.stuck = nil
	if x.Observe {
		if observed, err := x.observe(ifc, dev.Index); observed || err != nil {
			return err
		}
	}
	if x.ReadOnly {
		ifc.err = fmt.Errorf("interface %q: no xdp_drop instance holds it: no XDP program is attached, and this read-only run attaches none", ifc.name)
		return ifc.err
	}
	want := bpf.Want{
		Ifindex: dev.Index, Name: ifc.name, Mode: x.mode,
		PinPath: x.PinPath, KeepAttached: x.KeepAttached, Replace: x.Replace,
	}
	if ifc.netns, err = handover.CurrentNetNS(); err == nil {
		x.handoff.want(&want, ifc, taker{log: x.Log, ifaces: x.ifaces, instance: x.instance})
	}
	got, err := x.instance().Acquire(want)
	x.logNotes(ifc.name, got.Notes)
	err = advise(err)
	if err != nil {
		if vanished(ifc.name, dev.Index) {
			// Removed between the lookup and the attach: not a failure.
			ifc.missing = true
			ifc.err = &notFoundError{name: ifc.name, midAttach: true}
			if x.PinPath != "" {
				x.removePins(ifc.name)
			}
			return ifc.err
		}
		if ifc.stuck != nil {
			ifc.err = stuckError(ifc.name, err, ifc.stuck)
			return ifc.err
		}
		ifc.err = x.explain(ifc.name, err)
		return ifc.err
	}
	ifc.prog = got.Program
	ifc.ifindex = dev.Index
	ifc.series.attached(x.gathers)
	ifc.rulesGen, ifc.swapErr = x.files.gen, nil
	if got.KeptRuleMaps && x.files.rules != nil {
		// The program kept holds the prefixes its files held then.
		ifc.rulesGen = staleRules
	}
	ifc.err = nil
	ifc.reported = ""
	return nil
}

// kernelSide holds the plugin instance's bpf.Instance, of the policy its
// prefix files gave in generation gen.
type kernelSide struct {
	in  *bpf.Instance
	gen uint64
}

// instance is the kernel side of the plugin instance, whose rule maps the
// programs of all its interfaces share: one per generation of the prefix
// files, made at its first attach or swap.
func (x *XDPDrop) instance() *bpf.Instance {
	if x.kernel.in == nil || x.kernel.gen != x.files.gen {
		x.setInstance(bpf.NewInstance(x.policy))
	}
	return x.kernel.in
}

// setInstance makes in the instance of the current generation. It goes on
// with the limiter of the one before, whichever route loads its rule maps
// first (an attach or a swap), so that budgets survive every generation;
// the one before is closed: its programs still attached hold their rule maps.
func (x *XDPDrop) setInstance(in *bpf.Instance) {
	in.ContinueLimits(x.kernel.in)
	x.closeInstance()
	x.kernel = kernelSide{in: in, gen: x.files.gen}
}

func (x *XDPDrop) closeInstance() {
	if x.kernel.in == nil {
		return
	}
	if err := x.kernel.in.Close(); err != nil {
		x.Log.Errorf("release the rule maps: %v", err)
	}
	x.kernel.in = nil
}

// logNotes logs what Acquire reports, under the interface's name.
func (x *XDPDrop) logNotes(name string, notes []bpf.Note) {
	for _, n := range notes {
		text := x.noteText(n)
		if !n.Instance {
			text = fmt.Sprintf("interface %q: %s", name, text)
		}
		if n.Warn {
			x.Log.Warnf("%s", text)
		} else {
			x.Log.Infof("%s", text)
		}
	}
}

// fellBack reports whether mode = "auto" fell back to generic mode.
func fellBack(mode bpf.Mode, prog *bpf.Program) bool {
	return mode == bpf.ModeAuto && prog.Mode() == bpf.ModeGeneric
}

// vanished reports whether the interface that had index ifindex is gone
// (or another one has its name now).
func vanished(name string, ifindex int) bool {
	dev, err := net.InterfaceByName(name)
	if err != nil {
		return !lookupFailed(err)
	}
	return dev.Index != ifindex
}

// lookupFailed tells an interface lookup that could not be made (out of
// file descriptors, say) from one that found no such interface.
func lookupFailed(err error) bool {
	var sysErr *os.SyscallError
	return errors.As(err, &sysErr)
}

// explain turns a load or attach error into one that says what to do.
func (x *XDPDrop) explain(name string, err error) error {
	var existing *bpf.ExistingProgramError
	var refused *bpf.NativeRefusedError
	var live *bpf.LiveOwnerError
	switch {
	case errors.As(err, &live) && len(live.Owners) == 0:
		return fmt.Errorf("interface %q: %w; an interface is never taken from a running xdp_drop, even with replace = true, so it is left alone: "+
			"run as root to see the owner, stop the other instance, or, if it is a link kept by a stopped one, remove that pin", name, err)
	case errors.As(err, &live):
		return fmt.Errorf("interface %q: %w; an interface is never taken from a running xdp_drop, even with replace = true, so it is left alone: "+
			"stop that instance, or give each instance interfaces and a pin_path of its own", name, err)
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("interface %q: %w; %s", name, err, fdAdvice(x.policy.FDs()))
	case errors.Is(err, bpf.ErrPermission):
		exe, _ := os.Executable()
		if exe == "" {
			exe = "telegraf-xdp-drop"
		}
		// The group and mode first: a binary with these capabilities that
		// anyone may run lets anyone drop any interface's traffic.
		return fmt.Errorf("interface %q: %w; run as root or grant them, letting only Telegraf's group run it: "+
			"chown root:telegraf %s && chmod 0750 %s && setcap cap_bpf,cap_net_admin,cap_perfmon+ep %s", name, err, exe, exe, exe)
	case errors.As(err, &refused) && refused.MTULimited():
		return fmt.Errorf(`interface %q: %w, or set mode = "generic" (or "auto", which falls back to it)`, name, err)
	case errors.Is(err, bpf.ErrNativeUnsupported):
		return fmt.Errorf(`interface %q: %w; set mode = "generic" or mode = "auto"`, name, err)
	case errors.As(err, &existing) && existing.Uninspectable:
		return fmt.Errorf("interface %q: %w: whose it is cannot be told (another xdp_drop instance's or another tool's), so it is left alone; "+
			"see it with: bpftool prog show id %d (as root), then stop or detach its owner, or set replace = true to replace it", name, err, existing.ID)
	case errors.As(err, &existing) && existing.Name == bpf.ProgramName:
		return fmt.Errorf("interface %q: %w: an xdp_drop program that another running instance owns, or one left pinned or attached by hand; "+
			"it is left alone: stop the other instance; if none runs, set replace = true to replace it", name, err)
	case errors.As(err, &existing):
		return fmt.Errorf("interface %q: %w; it is not ours, so it is left alone: set replace = true to replace it, or detach it first", name, err)
	case x.mode == bpf.ModeOffload:
		return fmt.Errorf(`interface %q: offload mode failed: %w; few NICs offload XDP with per-CPU maps: use mode = "native"`, name, err)
	}
	return fmt.Errorf("interface %q: %w", name, err)
}

// fdAdvice explains running out of file descriptors: the limit and what
// each interface needs (perInterface, with the rules' maps).
func fdAdvice(perInterface int) string {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Sprintf("out of file descriptors: each attached interface holds %d; raise RLIMIT_NOFILE (systemd: LimitNOFILE=)", perInterface)
	}
	return fmt.Sprintf("out of file descriptors: RLIMIT_NOFILE is %d (hard limit %d) and each attached interface holds %d; "+
		"raise the hard limit of the process that starts the binary (systemd: LimitNOFILE= in Telegraf's unit)",
		lim.Cur, lim.Max, perInterface)
}

// notFoundError says an interface does not exist and which ones do, or
// that it was removed.
type notFoundError struct {
	name      string
	here      []string
	removedID ebpf.ProgramID // the program that went with it
	midAttach bool           // removed while it was being attached
}

func (e *notFoundError) Error() string {
	switch {
	case e.removedID != 0:
		return fmt.Sprintf("interface %q not found: it was removed, and program id %d with it; it is attached again once it appears", e.name, e.removedID)
	case e.midAttach:
		return fmt.Sprintf("interface %q not found: it was removed while it was being attached; it is attached once it appears again", e.name)
	}
	return fmt.Sprintf("interface %q not found (interfaces here: %s); it is attached once it appears", e.name, strings.Join(e.here, ", "))
}

// gone says how a matched interface went away, for the log.
func (e *notFoundError) gone() string {
	switch {
	case e.removedID != 0:
		return fmt.Sprintf("removed, and program id %d with it", e.removedID)
	case e.midAttach:
		return "removed while it was being attached"
	}
	return "gone before it could be attached"
}

func unknownInterface(name string) error {
	e := &notFoundError{name: name}
	if list, err := net.Interfaces(); err == nil {
		for _, i := range list {
			e.here = append(e.here, tagName(i.Name))
		}
	}
	sort.Strings(e.here)
	return e
}

// report passes an error to Telegraf once per distinct error, so an interface
// that stays missing does not log at every gather, even as the list of the
// interfaces that exist changes.
func (x *XDPDrop) report(acc telegraf.Accumulator, ifc *iface, err error) {
	key := err.Error()
	var nf *notFoundError
	if errors.As(err, &nf) {
		key = "not found"
	}
	if key == ifc.reported {
		return
	}
	ifc.reported = key
	if nf != nil && ifc.matched {
		// Interfaces a pattern matches come and go: no fault.
		x.Log.Infof("interface %q: %s; tracked again when a pattern matches it", ifc.name, nf.gone())
		return
	}
	acc.AddError(err)
}

// readSeries adds the series of an attached interface to snap; false when
// it is not attached or its counters could not be read.
func (x *XDPDrop) readSeries(acc telegraf.Accumulator, ifc *iface, snap *Snapshot) bool {
	if ifc.prog == nil {
		return false
	}
	return x.readSeriesFrom(acc, ifc, snap, func(f bpf.BlockFunc) error { return x.readCounters(ifc, f) })
}

// readSeriesFrom adds the series of the counters read reads to snap; false
// when they were not read in this gather.
func (x *XDPDrop) readSeriesFrom(acc telegraf.Accumulator, ifc *iface, snap *Snapshot, read func(bpf.BlockFunc) error) bool {
	if ifc.series.readIn(x.gathers) {
		// Attached in place of a program read in this gather: its points
		// stand for this gather; the new counters are read at the next.
		return false
	}
	name := tagName(ifc.name)
	ifc.series.viewed([2]bool{x.PerQueue, x.PerCPU})
	// Every block with traffic is passed once: their rule counters add up.
	var rules, limited [bpf.MaxRules]bpf.Counter
	traffic := false
	err := read(func(queue, cpu int, b *bpf.Block) {
		traffic = true
		snap.Series = x.appendClasses(snap.Series, &ifc.series, name, b, queueTag(queue), cpuTag(cpu))
		for i := range x.policy.Rules {
			rules[i].Packets += b.Rule[i].Packets
			rules[i].Bytes += b.Rule[i].Bytes
			limited[i].Packets += b.Limited[i].Packets
			limited[i].Bytes += b.Limited[i].Bytes
		}
	})
	if err != nil {
		x.report(acc, ifc, fmt.Errorf("interface %q: %w", ifc.name, err))
		return false
	}
	if !traffic && !x.PerQueue && !x.PerCPU {
		// No block with traffic was passed: the standing series stand at zero.
		snap.Series = x.appendClasses(snap.Series, &ifc.series, name, &noTraffic, "", "")
	}
	ifc.series.read(x.gathers)
	gen := ifc.rulesGen
	if ifc.observer != "" {
		gen = x.files.gen // another instance's: never swapped here
	}
	snap.Rules = x.appendRules(snap.Rules, name, gen, ifc.swapErr, &rules, &limited)
	return true
}

// appendRules appends one series per rule, also for rules that never
// matched: the frames each rule decided. A limit rule has two, the frames
// it passed within budget and those it dropped over it (limited). A rule
// with prefix files reports the set the interface's program holds, of
// generation gen (swapErr: why it is not the policy's).
func (x *XDPDrop) appendRules(series []RuleSeries, name string, gen uint64, swapErr error, rules, limited *[bpf.MaxRules]bpf.Counter) []RuleSeries {
	for i, r := range x.policy.Rules {
		if r.Limit != nil {
			series = appendLimitRule(series, name, r.Name, x.policy.DryRun, rules[i], limited[i])
			files := x.files.Fields(i, gen, swapErr)
			for j := len(series) - 2; j < len(series); j++ {
				files.put(&series[j])
			}
			continue
		}
		action := bpf.ActionPass
		if r.Drop {
			action = bpf.ActionDrop
		}
		s := RuleSeries{
			Interface: name, Rule: r.Name, Action: ActionTag(x.policy.DryRun, action),
			Packets: rules[i].Packets, Bytes: rules[i].Bytes,
		}
		x.files.Fields(i, gen, swapErr).put(&s)
		series = append(series, s)
	}
	return series
}

// readCounters reads the counters of an attached interface split as the
// optional views (per_queue, per_cpu) ask.
func (x *XDPDrop) readCounters(ifc *iface, f bpf.BlockFunc) error {
	switch {
	case x.PerQueue && x.PerCPU:
		return ifc.prog.ReadPerQueueCPU(&ifc.counters, f)
	case x.PerQueue:
		return ifc.prog.ReadPerQueue(&ifc.counters, f)
	case x.PerCPU:
		return ifc.prog.ReadPerCPU(f)
	}
	return ifc.prog.ReadSum(&ifc.counters, f)
}

func cpuTag(cpu int) string {
	if cpu < 0 {
		return ""
	}
	return strconv.Itoa(cpu)
}

// queueTag names an RX queue; the last block holds every queue past it.
func queueTag(queue int) string {
	switch {
	case queue < 0:
		return ""
	case queue == bpf.QueueSlots-1:
		return "overflow"
	}
	return strconv.Itoa(queue)
}

// link is the attachment state of an interface.
func (x *XDPDrop) link(ifc *iface) Link {
	l := Link{Interface: tagName(ifc.name), Mode: string(x.mode)}
	switch {
	case ifc.prog != nil:
		l.Attached = true
		if ifc.prog.Observed() {
			l.Observer = ifc.observer
			l.LinkID = uint32(ifc.attachment.Link)
			for _, h := range ifc.attachment.Owners {
				l.Holders = append(l.Holders, Holder{PID: h.PID, Comm: h.Comm})
			}
		}
		l.Mode = string(ifc.prog.Mode())
		l.ProgramID = int64(ifc.prog.ID())
		l.Fallback = fellBack(x.mode, ifc.prog)
	case ifc.err != nil:
		l.Error = Printable(firstLine(ifc.err))
	}
	return l
}

// firstLine shortens a multi-line error (a verifier log, or errors joined)
// for the error field; the whole text reaches Telegraf's log through the
// accumulator, and the field says which it is.
func firstLine(err error) string {
	msg, rest, multi := strings.Cut(err.Error(), "\n")
	if !multi || rest == "" {
		return msg
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return msg + " (verifier log in Telegraf's log)"
	}
	return msg + " (the rest in Telegraf's log)"
}
