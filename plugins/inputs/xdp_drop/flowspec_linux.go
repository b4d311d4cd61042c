//go:build linux

package xdp_drop

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/vishvananda/netlink"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/flowspec"
	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// flowSpec runs [flowspec] from Start to Stop: the BGP receiver, the
// rule table it applies the accepted rules to, the namespace's addresses
// it accepts destinations in, and the rules' series.
type flowSpec struct {
	opts     *flowSpecSettings // nil without [flowspec]
	receiver *flowspec.Speaker // the BGP receiver, in a process of its own
	table    flowApplier
	local    atomic.Pointer[[]netip.Prefix]
	series   flowSeries
	// addrErr is the error the last read of the addresses reported;
	// peersErr the last write of the peers' states.
	addrErr, peersErr string
}

// flowApplier puts the receiver's rule sets in force on the instance's
// FlowSpec table, whichever table that is now: a set that came while no
// table was there (no interface attached yet), or before the table
// changed, is put on the one that comes. The receiver calls set from its
// own goroutine, never concurrently; the plugin calls use under its lock.
type flowApplier struct {
	mu     sync.Mutex
	table  *bpf.FlowTable
	rules  []bpf.FlowRule
	wanted bool // rules holds a set the receiver asked for
	err    error
}

// set is the receiver's apply.
func (a *flowApplier) set(rules []bpf.FlowRule) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rules, a.wanted = rules, true
	if a.table == nil {
		return nil
	}
	a.err = a.table.Set(rules)
	return a.err
}

// use makes t the table rule sets go to (nil: none, from Stop on), and
// puts the last set asked for on a table new to it.
func (a *flowApplier) use(t *bpf.FlowTable) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t == a.table {
		return nil
	}
	a.table = t
	if t == nil || !a.wanted {
		return nil
	}
	a.err = t.Set(a.rules)
	return a.err
}

// inForce is the set in force: the table's, which holds the set handed
// over by a predecessor until the receiver's first.
func (a *flowApplier) inForce() []bpf.FlowRule {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.table == nil {
		return nil
	}
	return a.table.Rules()
}

// startFlowSpec starts the receiver once the interfaces are attached (so
// that the instance's table holds the rules a predecessor handed over,
// which the receiver keeps in force until its peers have sent theirs). A
// console view starts no session: the running instance holds them.
func (x *XDPDrop) startFlowSpec(acc telegraf.Accumulator) {
	s := x.flow.opts
	if s == nil || s.view {
		return
	}
	x.refreshLocal(acc)
	table := x.links.flowTable()
	if err := x.flow.table.use(table); err != nil {
		acc.AddError(fmt.Errorf("flowspec: %w", err))
	}
	cfg := flowspec.Config{
		LocalAS: s.localAS, RouterID: s.routerID, MaxRules: s.maxRules, OnlyLocalDestinations: s.onlyLocal,
		LocalPrefixes: func() []netip.Prefix { return *x.flow.local.Load() },
		Sampling:      x.links.policy.Sample.Rate > 0,
		Log:           x.flowLog,
	}
	for _, p := range s.peers {
		cfg.Peers = append(cfg.Peers, flowspec.Peer{Address: p.address, Port: p.port, PeerAS: p.peerAS, Passive: p.passive, Password: p.password})
	}
	// On a goroutine of its own: its sockets are the process's network
	// namespace's, not that of the thread Start runs on (namespace).
	type started struct {
		r   *flowspec.Speaker
		err error
	}
	done := make(chan started, 1)
	go func() {
		r, err := flowspec.StartSpeaker(cfg, x.flow.table.set)
		done <- started{r, err}
	}()
	st := <-done
	if st.err != nil {
		acc.AddError(fmt.Errorf("flowspec: start the BGP receiver: %w; no FlowSpec rule is received (the rules handed over stay in force)", st.err))
		return
	}
	x.flow.receiver = st.r
	x.writePeers(acc, st.r.Peers()) // a view reads them from the start
	if handed := x.flow.table.inForce(); len(handed) > 0 {
		st.r.Adopt(handed)
		x.Log.Infof("flowspec: %d rules handed over by the stopped instance stay in force until every peer has sent its own", len(handed))
	}
	for _, p := range s.peers {
		how := "connecting to it"
		if p.passive {
			how = fmt.Sprintf("waiting for it to connect to port %d", p.port)
		}
		x.Log.Infof("flowspec: peer %s port %d AS %d: %s", p.address, p.port, p.peerAS, how)
	}
}

// flowLog passes the receiver's log lines to Telegraf's, with its level.
func (x *XDPDrop) flowLog(level byte, msg string) {
	msg = strings.TrimPrefix(msg, "flowspec: ")
	switch level {
	case 'E':
		x.Log.Errorf("flowspec: %s", msg)
	case 'W':
		x.Log.Warnf("flowspec: %s", msg)
	case 'I':
		x.Log.Infof("flowspec: %s", msg)
	default:
		x.Log.Debugf("flowspec: %s", msg)
	}
}

// useFlowSpec, at every gather, reads the namespace's addresses again
// and points the rule sets at the table of the instance attached now.
func (x *XDPDrop) useFlowSpec(acc telegraf.Accumulator) {
	if x.flow.opts == nil || x.flow.opts.view || x.flow.receiver == nil {
		return
	}
	x.refreshLocal(acc)
	if err := x.flow.table.use(x.links.flowTable()); err != nil {
		acc.AddError(fmt.Errorf("flowspec: put the rules in force: %w", err))
	}
}

// stopFlowSpec stops the receiver after the handover: the rules stay in
// force in the maps handed over, and nothing the receiver does on its way
// out (its sessions closing) reaches them.
func (x *XDPDrop) stopFlowSpec() {
	x.flow.table.use(nil)
	if x.flow.receiver != nil {
		x.flow.receiver.Stop()
		x.flow.receiver = nil
	}
}

// refreshLocal reads the addresses of the plugin's namespace, each a host
// prefix, for only_local_destinations; a read that fails keeps those
// read before and is reported once.
func (x *XDPDrop) refreshLocal(acc telegraf.Accumulator) {
	var list []netip.Prefix
	err := nsthread.In(x.Namespace, func() error {
		var err error
		list, err = hostPrefixes()
		return err
	})
	switch {
	case err != nil && err.Error() != x.flow.addrErr:
		x.flow.addrErr = err.Error()
		acc.AddError(fmt.Errorf("flowspec: only_local_destinations: %w; the addresses read before stay", err))
	case err == nil:
		x.flow.addrErr = ""
		x.flow.local.Store(&list)
	}
	if x.flow.local.Load() == nil {
		x.flow.local.Store(&[]netip.Prefix{})
	}
}

// hostPrefixes are the addresses of every interface of the calling
// thread's namespace, each as a host prefix.
func hostPrefixes() ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list the addresses: %w", err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			ip = ip.Unmap()
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
	return out, nil
}

// flowTable is the FlowSpec table of the instance the programs attached
// now share; nil before there is one.
func (l *links) flowTable() *bpf.FlowTable {
	if l.kernel.in == nil {
		return nil
	}
	return l.kernel.in.FlowSpec()
}

// readFlow reads every attached interface's FlowSpec counters, of the
// rules inForce.
func (l *links) readFlow(inForce []bpf.FlowRule) []flowRead {
	var out []flowRead
	for _, ifc := range l.ifaces {
		if ifc.prog == nil {
			continue
		}
		c, err := ifc.prog.FlowCounters()
		if err != nil {
			err = fmt.Errorf("interface %s: read the FlowSpec counters: %w", quote.Value(ifc.name), err)
		}
		out = append(out, flowRead{name: ifc.name, rules: inForce, counts: c, err: err})
	}
	return out
}

// flowPoints adds the rules' and the peers' points to snap.
func (x *XDPDrop) flowPoints(acc telegraf.Accumulator, snap *Snapshot) {
	if x.flow.opts == nil {
		return
	}
	if x.flow.opts.view {
		x.viewFlowPoints(acc, snap)
		return
	}
	reads := x.links.readFlow(x.flow.table.inForce())
	texts := map[string]string{}
	if x.flow.receiver != nil {
		for _, rs := range x.flow.receiver.Rules() {
			if rs.Refused == "" {
				texts[rs.Rule.ID] = rs.Text
			}
		}
	}
	// The rule's own text, which a rule handed over keeps; the receiver's
	// for a rule that came without one.
	text := func(r *bpf.FlowRule) string {
		if r.Text != "" {
			return r.Text
		}
		return texts[r.ID]
	}
	var errs []error
	snap.FlowSpec, errs = x.flow.series.points(snap.FlowSpec, text, reads)
	for _, err := range errs {
		acc.AddError(err)
	}
	if x.flow.receiver != nil {
		peers := x.flow.receiver.Peers()
		snap.FlowPeers = peerPoints(snap.FlowPeers, peers, time.Now())
		x.writePeers(acc, peers)
	}
}

// peerPoints appends the point of every peer.
func peerPoints(out []FlowPeerSeries, peers []flowspec.PeerState, now time.Time) []FlowPeerSeries {
	for _, p := range peers {
		s := FlowPeerSeries{
			Peer: quote.Tag(p.Address.String()), State: p.State, Up: p.Up,
			UptimeS: int64(p.Uptime / time.Second), Received: int64(p.Received), Accepted: int64(p.Accepted),
			RefusedBy: make([]int64, len(FlowRefusals)), LastUpdateS: -1,
		}
		for _, n := range p.Refused {
			s.Refused += int64(n)
		}
		for i, reason := range FlowRefusals {
			s.RefusedBy[i] = int64(p.Refused[reason])
		}
		if !p.LastUpdate.IsZero() {
			s.LastUpdateS = max(int64(now.Sub(p.LastUpdate)/time.Second), 0)
		}
		out = append(out, s)
	}
	return out
}
