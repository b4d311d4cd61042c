//go:build linux

package xdp_drop

import "github.com/influxdata/telegraf"

// Start attaches to every configured interface. An interface that fails is
// reported and retried at every gather; it never stops the others.
func (x *XDPDrop) Start(acc telegraf.Accumulator) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.links.start(acc)
	x.useBans(acc)
	x.startFlowSpec(acc)
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

// Reconcile brings the interfaces to the configuration, as the gather it
// starts (links.reconcile): it attaches, releases and swaps. What a
// released program counted waits for the Snapshot that follows; errors go
// to acc, as Gather's do.
func (x *XDPDrop) Reconcile(acc telegraf.Accumulator) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.links.reconcile(acc)
	x.useBans(acc)
	x.useFlowSpec(acc)
}

// Snapshot reads the counters of every attached interface (after what the
// programs the last Reconcile released counted) and the link state of every
// configured one; it attaches, releases and swaps nothing. Errors go to
// acc, as Gather's do.
func (x *XDPDrop) Snapshot(acc telegraf.Accumulator) Snapshot {
	x.mu.Lock()
	defer x.mu.Unlock()
	snap := x.links.snapshot(acc)
	if x.bans != nil {
		snap.Bans = x.banOpts.banPoints(snap.Bans, x.bans, x.links.readBans())
		snap.Events = banEvents(snap.Events, x.bans.TakeEvents(nil))
	}
	x.flowPoints(acc, &snap)
	return snap
}

// Stop hands the attached interfaces over to a holder process for
// handover_timeout, then detaches them from this process; with
// keep_attached the pinned links keep the programs attached instead (a
// link that could not be pinned is handed over).
func (x *XDPDrop) Stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.bans.Stop()
	x.links.stop()
	x.stopFlowSpec()
}
