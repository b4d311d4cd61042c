//go:build linux

package xdp_drop

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/flowspec"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// peerRecord is a peer's state as the instance running the receiver
// writes it at every gather for a console view (bpf.FlowTable.WritePeers),
// which starts no session of its own: times as unix ns, so that the view
// says the uptime and the last update's age at its own reading.
type peerRecord struct {
	Address    string         `json:"address"`
	Port       uint16         `json:"port"`
	State      string         `json:"state"`
	Up         bool           `json:"up"`
	UpSince    int64          `json:"up_since,omitempty"`
	Received   int            `json:"received"`
	Accepted   int            `json:"accepted"`
	Refused    map[string]int `json:"refused,omitempty"`
	LastUpdate int64          `json:"last_update,omitempty"`
}

// peerRecords are the records of peers at now, at most bpf.FlowMaxPeers
// (the peers [flowspec] allows).
func peerRecords(peers []flowspec.PeerState, now time.Time) ([][]byte, error) {
	out := make([][]byte, 0, min(len(peers), bpf.FlowMaxPeers))
	for _, p := range peers[:min(len(peers), bpf.FlowMaxPeers)] {
		r := peerRecord{Address: p.Address.String(), Port: p.Port, State: p.State, Up: p.Up,
			Received: p.Received, Accepted: p.Accepted, Refused: p.Refused}
		if p.Up {
			r.UpSince = now.Add(-p.Uptime).UnixNano()
		}
		if !p.LastUpdate.IsZero() {
			r.LastUpdate = p.LastUpdate.UnixNano()
		}
		j, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// peerStates reads the records back, as the receiver's states at now.
func peerStates(records [][]byte, now time.Time) ([]flowspec.PeerState, error) {
	out := make([]flowspec.PeerState, 0, len(records))
	for _, j := range records {
		var r peerRecord
		if err := json.Unmarshal(j, &r); err != nil {
			return nil, fmt.Errorf("read a peer's state: %w", err)
		}
		a, err := netip.ParseAddr(r.Address)
		if err != nil {
			return nil, fmt.Errorf("read a peer's state: address %s: %w", quote.Value(r.Address), err)
		}
		p := flowspec.PeerState{Address: a, Port: r.Port, State: r.State, Up: r.Up,
			Received: r.Received, Accepted: r.Accepted, Refused: r.Refused}
		if r.Up && r.UpSince != 0 {
			p.Uptime = max(now.Sub(time.Unix(0, r.UpSince)), 0)
		}
		if r.LastUpdate != 0 {
			p.LastUpdate = time.Unix(0, r.LastUpdate)
		}
		out = append(out, p)
	}
	return out, nil
}

// writePeers writes the peers' states where a console view reads them;
// an error is reported once, until a write succeeds.
func (x *XDPDrop) writePeers(acc telegraf.Accumulator, peers []flowspec.PeerState) {
	t := x.links.flowTable()
	if t == nil {
		return
	}
	records, err := peerRecords(peers, time.Now())
	if err == nil {
		err = t.WritePeers(records)
	}
	switch {
	case err != nil && err.Error() != x.flow.peersErr:
		x.flow.peersErr = err.Error()
		acc.AddError(fmt.Errorf("flowspec: write the peers' states for -status and -watch: %w; the points say them", err))
	case err == nil:
		x.flow.peersErr = ""
	}
}

// viewFlowPoints is flowPoints in a console view: the rules in force and
// their counters on every interface observed, and the peers' states, read
// from the maps the running instance's programs run on; nothing of the
// view's own (it starts no session) and nothing written.
func (x *XDPDrop) viewFlowPoints(acc telegraf.Accumulator, snap *Snapshot) {
	snap.FlowViewed = true
	var reads []flowRead
	peersRead := false
	now := time.Now()
	for _, ifc := range x.links.ifaces {
		if ifc.prog == nil || !ifc.prog.Observed() {
			continue
		}
		rules, counts, err := ifc.prog.FlowRulesInForce()
		if err != nil {
			err = fmt.Errorf("interface %s: read the FlowSpec rules in force of the running instance: %w", quote.Value(ifc.name), err)
		}
		reads = append(reads, flowRead{name: ifc.name, rules: rules, counts: counts, err: err})
		if peersRead {
			continue
		}
		// The instance's peers, the same through each of its programs.
		w, err := ifc.prog.FlowPeers()
		var peers []flowspec.PeerState
		if err == nil {
			peers, err = peerStates(w.Records, now)
		}
		if err != nil {
			acc.AddError(fmt.Errorf("interface %s: read the FlowSpec peers of the running instance: %w", quote.Value(ifc.name), err))
			continue
		}
		peersRead = true
		snap.FlowPeers, snap.FlowPeersAt = peerPoints(snap.FlowPeers, peers, now), w.At
	}
	var errs []error
	snap.FlowSpec, errs = x.flow.series.points(snap.FlowSpec, func(r *bpf.FlowRule) string { return r.Text }, reads)
	for _, err := range errs {
		acc.AddError(err)
	}
}
