//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/filter"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// start attaches to every configured interface, after opening the capture
// and preparing the handover. An interface that fails is reported and
// retried at every gather; it never stops the others.
func (l *links) start(acc telegraf.Accumulator) {
	if len(l.opts.interfaces) == 0 {
		l.log.Warnf(`interfaces = []: nothing is attached and nothing is reported; list the interfaces to attach to in the plugin's config, e.g. interfaces = ["eth1"]`)
	}
	l.sampling.openCapture(acc)
	l.handoff.prepare(l.log, time.Duration(*l.opts.handoverTimeout))
	defer l.handoff.beginStart()()
	err := l.ns.do(func() error {
		l.discover(acc)
		for _, ifc := range l.ifaces {
			if err := l.attach(ifc); err != nil {
				l.report(acc, ifc, err)
			}
		}
		return nil
	})
	l.namespaceFailed(acc, err)
	l.swapPrefixes(acc)
	l.startSamplers(acc)
}

// reconcile brings the interfaces to the configuration, as the gather it
// starts: it forgets the interfaces the last snapshot reported gone, reads
// the prefix files again, finds the interfaces patterns match, releases the
// programs the kernel detached, attaches those not attached, swaps the
// programs to the policy's prefixes, starts the samplers and checks the
// capture. What a released program counted waits for the snapshot that
// follows; errors go to acc.
func (l *links) reconcile(acc telegraf.Accumulator) {
	if l.gathers > 0 {
		// Not before the first: an interface missing at Start is still
		// reported by a snapshot.
		l.forgetVanished()
	}
	l.released = Snapshot{}
	l.gathers++
	l.handoff.beginGather()
	l.refreshPrefixFiles(acc)
	err := l.ns.do(func() error {
		l.discover(acc)
		for _, ifc := range l.ifaces {
			l.releaseDetached(acc, ifc, &l.released, true)
			if ifc.prog == nil {
				if err := l.attach(ifc); err != nil {
					l.report(acc, ifc, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		// Link state needs no namespace: still notice detached programs.
		for _, ifc := range l.ifaces {
			l.releaseDetached(acc, ifc, &l.released, false)
		}
	}
	l.namespaceFailed(acc, err)
	l.swapPrefixes(acc)
	l.sampling.checkCapture(acc)
	l.startSamplers(acc)
}

// startSamplers starts reading the samples of every attached interface at
// once, rather than at the first gather: the ring holds a quarter of a
// second of events at the cap, a gather interval many times that.
func (l *links) startSamplers(acc telegraf.Accumulator) {
	for _, ifc := range l.ifaces {
		if ifc.prog == nil || ifc.observer != "" {
			continue
		}
		if err := l.sampling.start(&ifc.tap, ifc.name, ifc.prog, &ifc.counters); err != nil {
			l.report(acc, ifc, fmt.Errorf("interface %s: %w", quote.Value(ifc.name), err))
		}
	}
}

// snapshot reads the counters of every attached interface (after what the
// programs the last reconcile released counted) and the link state of every
// configured one; it attaches, releases and swaps nothing. Errors go to acc.
func (l *links) snapshot(acc telegraf.Accumulator) Snapshot {
	// Sized as the last one: a gather allocates once per slice.
	snap := Snapshot{Series: make([]Series, 0, max(l.lastSeries, len(l.released.Series))), Links: make([]Link, 0, len(l.ifaces))}
	snap.Series = append(snap.Series, l.released.Series...)
	snap.Rules = append(snap.Rules, l.released.Rules...)
	// One bound for every interface's readers: a gather never waits longer.
	drainBy := time.Now().Add(sampleDrainWait)
	for _, ifc := range l.ifaces {
		first := len(snap.Series)
		var counted []Series
		if l.readSeries(acc, ifc, &snap) {
			counted = snap.Series[first:len(snap.Series):len(snap.Series)]
		}
		lk := l.link(ifc)
		// An observed program's ring is its owner's to read: reading it
		// here would take the events away from it.
		if ifc.prog != nil && ifc.observer == "" {
			snap.Top = l.sampling.topSources(&ifc.tap, ifc.prog, ifc.name, counted, &lk, snap.Top, drainBy, func(err error) { l.report(acc, ifc, err) })
		}
		snap.Links = append(snap.Links, lk)
	}
	l.stampSnapshot(&snap, time.Now())
	l.lastSeries = len(snap.Series)
	return snap
}

// stampSnapshot sets the snapshot's time, at once the time of the gather
// in the interfaces' series logs.
func (l *links) stampSnapshot(snap *Snapshot, at time.Time) {
	snap.Time = at
	for _, ifc := range l.ifaces {
		ifc.series.stamp(l.gathers, at)
	}
}

// releaseDetached releases the program of an interface the kernel
// detached it from, after adding what it counted since the last gather to
// snap. inNS says whether the calling thread is in the interfaces'
// namespace, where the interface can be looked up to tell why.
func (l *links) releaseDetached(acc telegraf.Accumulator, ifc *iface, snap *Snapshot, inNS bool) {
	if ifc.prog == nil {
		return
	}
	err := ifc.prog.Attached()
	if err == nil {
		return
	}
	l.readSeries(acc, ifc, snap)
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
		l.release(ifc, gone)
		ifc.missing = true
		l.report(acc, ifc, gone)
		if l.opts.pinPath != "" && ifc.observer == "" {
			l.removePins(ifc.name)
		}
		return
	}
	if ifc.observer != "" {
		l.log.Infof("interface %s: the observed program id %d is no longer attached: %v; its counters show again once an instance attaches one", quote.Value(ifc.name), ifc.prog.ID(), err)
		l.release(ifc, fmt.Errorf("interface %s: %w", quote.Value(ifc.name), err))
		return
	}
	if removed && ifc.matched {
		// Removed and created again: churn among matched interfaces.
		l.log.Infof("interface %s: program id %d no longer attached: %v; attaching again", quote.Value(ifc.name), ifc.prog.ID(), err)
	} else {
		l.log.Warnf("interface %s: program id %d no longer attached: %v; attaching again", quote.Value(ifc.name), ifc.prog.ID(), err)
	}
	l.release(ifc, fmt.Errorf("interface %s: %w", quote.Value(ifc.name), err))
	if removed && l.opts.pinPath != "" && ifc.observer == "" {
		// A new interface of that name starts from zero, like without pins.
		l.removePins(ifc.name)
	}
}

// removePins unpins what the plugin pinned for a removed interface; files
// other tools put in its directory stay, and the log names them.
func (l *links) removePins(name string) {
	dir := filepath.Join(l.opts.pinPath, name)
	left, err := bpf.RemovePins(dir)
	if err != nil {
		l.log.Warnf("interface %s: %v", quote.Value(name), err)
	}
	if len(left) > 0 {
		for i := range left {
			left[i] = quote.Tag(left[i])
		}
		l.log.Infof("interface %s: unpinned its counters; left %s in place, holding %s that xdp_drop did not pin", quote.Value(name), quote.Value(dir), strings.Join(left, ", "))
	}
}

// namespaceFailed marks every unattached interface with the namespace error.
func (l *links) namespaceFailed(acc telegraf.Accumulator, err error) {
	if err == nil {
		l.nsReported = ""
		return
	}
	for _, ifc := range l.ifaces {
		if ifc.prog == nil {
			ifc.err = err
			l.report(acc, ifc, err)
		}
	}
	if len(l.ifaces) == 0 && err.Error() != l.nsReported {
		// Only patterns configured: nothing else carries the error.
		l.nsReported = err.Error()
		acc.AddError(err)
	}
}

// discover adds the interfaces that glob patterns match and that are not
// tracked yet. Loopback is matched only when named exactly.
func (l *links) discover(acc telegraf.Accumulator) {
	if l.selector == nil {
		return
	}
	list, err := net.Interfaces()
	if err != nil {
		acc.AddError(fmt.Errorf("list interfaces: %w", err))
		return
	}
	tracked := make(map[string]bool, len(l.ifaces))
	for _, ifc := range l.ifaces {
		tracked[ifc.name] = true
	}
	var added []string
	for _, dev := range list {
		l.hintLiteral(dev.Name)
		if dev.Flags&net.FlagLoopback != 0 || tracked[dev.Name] || !l.selector.Match(dev.Name) {
			continue
		}
		l.ifaces = append(l.ifaces, &iface{name: dev.Name, matched: true})
		added = append(added, quote.Tag(dev.Name))
	}
	if len(added) > 0 {
		l.log.Debugf("interfaces matched: %s", strings.Join(added, ", "))
	}
}

// hintLiteral warns, once, when an interface is named exactly like a
// pattern of interfaces that does not match it, such as "rt[0]".
func (l *links) hintLiteral(name string) {
	if !isPattern(name) || l.literalHint[name] || !slices.Contains(l.opts.interfaces, name) {
		return
	}
	if f, err := filter.Compile([]string{name}); err == nil && f.Match(name) {
		return
	}
	if l.literalHint == nil {
		l.literalHint = make(map[string]bool)
	}
	l.literalHint[name] = true
	escaped := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(name)
	l.log.Warnf("interfaces: %s is a glob pattern, which does not match the interface named %s; to name that interface, escape the glob characters: '%s'", quote.Value(name), quote.Value(name), escaped)
}

// forgetVanished releases interfaces found by a pattern that have gone
// away, once their absence has been reported.
func (l *links) forgetVanished() {
	kept := l.ifaces[:0]
	for _, ifc := range l.ifaces {
		if ifc.matched && ifc.missing && ifc.prog == nil {
			l.sampling.forget(ifc.name)
			continue // its going was logged when it was found missing
		}
		kept = append(kept, ifc)
	}
	l.ifaces = kept
}

// stop hands the attached interfaces over to a holder process for
// handover_timeout, then detaches them from this process; with
// keep_attached the pinned links keep the programs attached instead (a
// link that could not be pinned is handed over).
func (l *links) stop() {
	if *l.opts.handoverTimeout > 0 {
		l.handoff.handOver(l.log, time.Duration(*l.opts.handoverTimeout), l.ifaces, l.kernel.in)
	}
	for _, ifc := range l.ifaces {
		if ifc.prog != nil && ifc.prog.Kept() {
			l.log.Infof("interface %s: left attached (keep_attached), program id %d", quote.Value(ifc.name), ifc.prog.ID())
		}
		l.release(ifc, errors.New("stopped"))
	}
	l.closeInstance()
	l.sampling.closeCapture()
}

// report passes an error to Telegraf once per distinct error, so an interface
// that stays missing does not log at every gather, even as the list of the
// interfaces that exist changes.
func (l *links) report(acc telegraf.Accumulator, ifc *iface, err error) {
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
		l.log.Infof("interface %s: %s; tracked again when a pattern matches it", quote.Value(ifc.name), nf.gone())
		return
	}
	acc.AddError(err)
}

// link is the attachment state of an interface.
func (l *links) link(ifc *iface) Link {
	lk := Link{Interface: quote.Tag(ifc.name), Mode: string(l.mode)}
	switch {
	case ifc.prog != nil:
		lk.Attached = true
		if ifc.prog.Observed() {
			lk.Observer = ifc.observer
			lk.LinkID = uint32(ifc.attachment.Link)
			for _, h := range ifc.attachment.Owners {
				lk.Holders = append(lk.Holders, Holder{PID: h.PID, Comm: h.Comm})
			}
		}
		lk.Mode = string(ifc.prog.Mode())
		lk.ProgramID = int64(ifc.prog.ID())
		lk.Fallback = fellBack(l.mode, ifc.prog)
	case ifc.err != nil:
		lk.Error = quote.Line(firstLine(ifc.err))
	}
	return lk
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
