//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// FlowPeersWritten is what the instance that runs the FlowSpec receiver
// last wrote of its peers (FlowTable.WritePeers): a record each, as the
// receiver gave them, and when.
type FlowPeersWritten struct {
	Records [][]byte
	At      time.Time // zero when nothing was written yet
}

// flowPeerHeader is the bytes before a peer record's own: the time it was
// written (unix ns) and its length.
const flowPeerHeader = 12

// FlowPeerRecordMax is the most bytes a peer record holds.
const FlowPeerRecordMax = flowPeerRecord - flowPeerHeader

// WritePeers writes the records of the receiver's peers, at most
// FlowMaxPeers of at most FlowPeerRecordMax bytes each, where a view of
// the instance's programs reads them (Program.FlowPeers), with the time of
// writing; the records written before past len(records) are cleared. The
// engine does not read them.
func (t *FlowTable) WritePeers(records [][]byte) error {
	s, err := t.state()
	if err != nil {
		return err
	}
	if len(records) > FlowMaxPeers {
		return fmt.Errorf("%d FlowSpec peers to write; at most %d", len(records), FlowMaxPeers)
	}
	now := uint64(time.Now().UnixNano())
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range FlowMaxPeers {
		val := make([]byte, flowPeerRecord)
		if i < len(records) {
			r := records[i]
			if len(r) > FlowPeerRecordMax {
				return fmt.Errorf("FlowSpec peer record %d is %d bytes; at most %d", i, len(r), FlowPeerRecordMax)
			}
			binary.LittleEndian.PutUint64(val, now)
			binary.LittleEndian.PutUint32(val[8:], uint32(len(r)))
			copy(val[flowPeerHeader:], r)
		}
		if err := s.maps.peers.Update(uint32(i), val, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write the FlowSpec peers' states: %w", err)
		}
	}
	return nil
}

// clearPeers clears every peer record.
func (s *flowState) clearPeers() error {
	val := make([]byte, flowPeerRecord)
	for i := range FlowMaxPeers {
		if err := s.maps.peers.Update(uint32(i), val, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("clear the FlowSpec peers' states: %w", err)
		}
	}
	return nil
}

// FlowRulesInForce reads, from the maps the program runs on, the FlowSpec
// rules in force in enforcement order and each one's counters on the
// program's interface, by FlowRule.ID. It only reads, so a view of
// another process's program (Observe) shows what that instance enforces
// without a table or a BGP session of its own. Nil without FlowSpec.
func (p *Program) FlowRulesInForce() ([]FlowRule, map[string]FlowCount, error) {
	if !p.in.policy.FlowSpec.On {
		return nil, nil, nil
	}
	saved, err := p.progMap(xdpDropMapFlowspecSaved)
	if err != nil {
		return nil, nil, err
	}
	defer saved.Close()
	counters, err := p.flowCountersMap()
	if err != nil {
		return nil, nil, err
	}
	// The writer saves a set chunk by chunk: a read across a rewrite may
	// see a record torn, and reads again.
	var records []flowSaved
	var slots map[string]uint32
	for try := 0; ; try++ {
		if records, slots, err = readSaved(saved); err == nil || try == 4 {
			break
		}
		time.Sleep(time.Duration(try+1) * 5 * time.Millisecond)
	}
	if err != nil {
		return nil, nil, err
	}
	rules := make([]FlowRule, len(records))
	counts := make(map[string]FlowCount, len(records))
	var per []xdpDropFsCount
	for i, r := range records {
		rules[i] = r.Rule
		if err := counters.Lookup(slots[r.Rule.ID], &per); err != nil {
			return nil, nil, fmt.Errorf("read FlowSpec counters: %w", err)
		}
		var c FlowCount
		for _, v := range per {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.DroppedPackets += v.DroppedPackets
			c.DroppedBytes += v.DroppedBytes
		}
		counts[r.Rule.ID] = c
	}
	return rules, counts, nil
}

// FlowPeers reads the peer records the instance running the receiver last
// wrote (FlowTable.WritePeers) in the maps the program runs on: read-only,
// as FlowRulesInForce. Empty without FlowSpec.
func (p *Program) FlowPeers() (FlowPeersWritten, error) {
	var out FlowPeersWritten
	if !p.in.policy.FlowSpec.On {
		return out, nil
	}
	m, err := p.progMap(xdpDropMapFlowspecPeers)
	if err != nil {
		return out, err
	}
	defer m.Close()
	if m.ValueSize() != flowPeerRecord {
		return out, errors.New("the program's FlowSpec peer map is not of this build")
	}
	val := make([]byte, flowPeerRecord)
	for i := range min(int(m.MaxEntries()), FlowMaxPeers) {
		if err := m.Lookup(uint32(i), &val); err != nil {
			return out, fmt.Errorf("read the FlowSpec peers' states: %w", err)
		}
		at := binary.LittleEndian.Uint64(val)
		n := binary.LittleEndian.Uint32(val[8:])
		if at == 0 || n == 0 || n > FlowPeerRecordMax {
			continue
		}
		if t := time.Unix(0, int64(at)); out.At.IsZero() || t.Before(out.At) {
			out.At = t
		}
		out.Records = append(out.Records, append([]byte(nil), val[flowPeerHeader:flowPeerHeader+n]...))
	}
	return out, nil
}
