package xdp_drop

import (
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/filter"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// links owns the interfaces and their programs: which interfaces are
// tracked, their attachment, release and handover, the kernel side their
// programs share, the swap of changed prefix files into them, and the
// counters read from them. Init fills in the policy as it validates, then
// wires the rest (wire); the plugin calls start, reconcile, snapshot and
// stop under its lock.
type links struct {
	log  telegraf.Logger
	opts linkOptions
	// ns runs the work on the interfaces in the configured network namespace.
	ns namespace
	// console reads the programs of another running instance (Observe).
	console console

	mode   bpf.Mode
	policy bpf.Policy
	// selector matches the glob patterns of interfaces less
	// interface_exclude; nil when every interface is named exactly.
	selector filter.Filter
	files    *prefixLists // the rules fed from prefix files, the plugin's
	sampling *sampling    // what sample_rate turns on, the plugin's
	// handoff hands the interfaces over on stop and takes them over at
	// attach (handover_linux.go).
	handoff *handoff
	// kernel is the policy's kernel side (Linux): created at the first
	// attach of each generation of prefix files, closed by stop.
	kernel kernelSide

	ifaces      []*iface
	nsReported  string          // the namespace error last reported, when no interface carries it
	literalHint map[string]bool // patterns already warned about an interface named like them
	lastSeries  int             // series in the last snapshot
	gathers     uint64          // reconciles done: the number of the current gather
	// released holds what the programs the last reconcile released
	// counted, for the snapshot that follows.
	released Snapshot
	// standing are the series emitted at every gather from attach, also at
	// zero (standingClasses).
	standing standingSet
}

// linkOptions are the options of the config that the interfaces and their
// programs follow.
type linkOptions struct {
	interfaces   []string // as configured: names and patterns
	pinPath      string
	keepAttached bool
	replace      bool
	// The views and handover_timeout are the plugin's own fields, read where
	// they are used: they may change between gathers (the series log starts
	// anew when the view does) and before Stop.
	perQueue, perCPU *bool
	handoverTimeout  *config.Duration
}

// wire gives the links what they need once Init has validated the options:
// the logger, the options, the run's, and the parts of the plugin they
// feed from. The interfaces named exactly are tracked from here on.
func (l *links) wire(log telegraf.Logger, opts linkOptions, netns string, run RunOptions, files *prefixLists, s *sampling) {
	l.log, l.opts, l.files, l.sampling = log, opts, files, s
	l.ns = namespace{name: netns}
	l.console = console{on: run.Observe, readOnly: run.ReadOnly, log: log}
	l.handoff = handoffOf(run.HandoverInstance)
	l.ifaces = nil
	for _, name := range opts.interfaces {
		if !isPattern(name) {
			l.ifaces = append(l.ifaces, &iface{name: literalName(name)})
		}
	}
}

// refreshPrefixFiles puts in force the prefixes of the prefix files that
// changed since the last gather (prefixLists.Refresh): the programs take
// them at the swap that follows (swapPrefixes).
func (l *links) refreshPrefixFiles(acc telegraf.Accumulator) {
	if next, changed := l.files.Refresh(acc, l.policy); changed {
		l.policy = next
	}
}
