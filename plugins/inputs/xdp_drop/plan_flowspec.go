package xdp_drop

import "net/netip"

// PlannedFlowSpec is [flowspec] as -check shows it: the speaker and its
// peers as Init read them. No session is started to show it.
type PlannedFlowSpec struct {
	LocalAS               uint32
	RouterID              netip.Addr
	MaxRules              int // per family
	OnlyLocalDestinations bool
	Peers                 []PlannedPeer
}

// PlannedPeer is a peer of the plan; N is its position in the config,
// from 1.
type PlannedPeer struct {
	N       int
	Address netip.Addr
	Port    uint16
	PeerAS  uint32
	Passive bool
	KeyFrom string // password_file; "" without TCP MD5
}

// planFlowSpec is the flowspec part of the plan; nil without [flowspec].
func (x *XDPDrop) planFlowSpec() *PlannedFlowSpec {
	s := x.flow.opts
	if s == nil {
		return nil
	}
	p := &PlannedFlowSpec{LocalAS: s.localAS, RouterID: s.routerID, MaxRules: s.maxRules, OnlyLocalDestinations: s.onlyLocal}
	for i, peer := range s.peers {
		p.Peers = append(p.Peers, PlannedPeer{N: i + 1, Address: peer.address, Port: peer.port, PeerAS: peer.peerAS, Passive: peer.passive, KeyFrom: peer.keyFrom})
	}
	return p
}
