package bpf

import (
	"fmt"
	"net/netip"
)

// FlowSpec rules (RFC 8955 for IPv4, RFC 8956 for IPv6) as the kernel
// enforces them: each FlowRule is one NLRI with its traffic actions, and a
// rule set is handed to the kernel in enforcement order, the first rule
// first (the order of RFC 8955 §5.1, which the receiver sorts by). The
// kernel's engine and this file's matcher decide alike: the engine's
// tables are compiled by evaluating the matcher (FlowComponent.Match).

// Operator bits of a FlowTerm, as in the operator octet on the wire (the
// end-of-list and length bits aside).
const (
	// FlowAnd: the term is ANDed with the one before; without it, ORed.
	// AND binds tighter than OR (RFC 8955 §4.2.1.1).
	FlowAnd uint8 = 0x40
	// Numeric operators: lt, gt, eq; 0 is false, all three true.
	FlowLT uint8 = 0x04
	FlowGT uint8 = 0x02
	FlowEQ uint8 = 0x01
	// Bitmask operators: not negates; match requires every bit of the
	// value set, else any of them.
	FlowNot   uint8 = 0x02
	FlowMatch uint8 = 0x01
)

// FlowTerm is one {operator, value} pair of a component.
type FlowTerm struct {
	Op    uint8
	Value uint64
}

// FlowComponent is one component's operator list, in wire order; nil
// means the rule has no such component (it matches any value).
type FlowComponent []FlowTerm

// Fragment bits of the fragment component (RFC 8955 §4.2.2.12).
const (
	FlowFragDF  = 0x01 // don't fragment (IPv4 only)
	FlowFragIsF = 0x02 // a fragment other than the first
	FlowFragFF  = 0x04 // the first fragment
	FlowFragLF  = 0x08 // the last fragment
)

// FlowPrefix is a prefix component. Offset (IPv6 only, RFC 8956) is how
// many leading bits are skipped: bits Offset..Prefix.Bits()-1 of the
// address must equal those of Prefix's address, whose bits before Offset
// are zero.
type FlowPrefix struct {
	Prefix netip.Prefix
	Offset uint8
}

// Match reports whether addr matches p.
func (p FlowPrefix) Match(addr netip.Addr) bool {
	if addr.Is4() != p.Prefix.Addr().Is4() {
		return false
	}
	a, b := addr.AsSlice(), p.Prefix.Addr().AsSlice()
	for i := int(p.Offset); i < p.Prefix.Bits(); i++ {
		bit := byte(0x80) >> (i % 8)
		if a[i/8]&bit != b[i/8]&bit {
			return false
		}
	}
	return true
}

// FlowAction is what a rule does with the frames it matches.
type FlowAction uint8

const (
	// FlowAccept: no traffic action; the frames are counted and go on.
	FlowAccept FlowAction = iota
	// FlowDrop: traffic-rate 0, bytes or packets (gobgp's "discard").
	FlowDrop
	// FlowLimit: a non-zero traffic-rate: the rule's frames together pass
	// at Rate (bytes or packets a second); the rest are dropped.
	FlowLimit
)

var flowActionNames = [...]string{"accept", "drop", "limit"}

// String names the action as the points' action tag.
func (a FlowAction) String() string {
	if int(a) < len(flowActionNames) {
		return flowActionNames[a]
	}
	return "unknown"
}

// FlowRule is one FlowSpec rule: its components (RFC 8955 §4.2.2 and
// RFC 8956 §3), ANDed, and its actions.
type FlowRule struct {
	// ID names the rule in counters and points; unique within a set.
	ID string
	// Text is the rule's canonical text (the receiver's), kept with the
	// set in force and handed over with it; the engine does not read it.
	Text string
	// IPv6 is the family (the AFI the NLRI came in).
	IPv6 bool

	Dst, Src     *FlowPrefix   // types 1, 2
	Proto        FlowComponent // type 3: IP protocol (IPv6: the upper-layer next header)
	Port         FlowComponent // type 4: source or destination port (TCP, UDP)
	DstPort      FlowComponent // type 5
	SrcPort      FlowComponent // type 6
	ICMPType     FlowComponent // type 7 (ICMP for IPv4, ICMPv6 for IPv6)
	ICMPCode     FlowComponent // type 8
	TCPFlags     FlowComponent // type 9, bitmask: the 12 bits after the data offset
	PacketLength FlowComponent // type 10
	DSCP         FlowComponent // type 11
	Fragment     FlowComponent // type 12, bitmask of FlowFrag*
	FlowLabel    FlowComponent // type 13, IPv6 only

	Action FlowAction
	// Rate is FlowLimit's rate a second, of bytes with RateBytes, else
	// of packets.
	Rate      float64
	RateBytes bool
	// Sample sends the rule's frames to the sampler (the S bit).
	Sample bool
	// Continue: the terminal-action bit is set, so the rules after this
	// one apply as well (RFC 8955 §7.3); without it evaluation stops here.
	Continue bool
}

// FlowFrame is what the engine reads of an IP frame whose headers are
// whole.
type FlowFrame struct {
	IPv6     bool
	Src, Dst netip.Addr
	Proto    uint8 // IPv6: after the extension headers
	// HasPorts: TCP or UDP with its ports in the frame, not a later fragment.
	HasPorts         bool
	SrcPort, DstPort uint16
	// HasICMP: ICMP (IPv4) or ICMPv6 (IPv6) with its type and code, not a later fragment.
	HasICMP            bool
	ICMPType, ICMPCode uint8
	// HasTCP: TCP with its flags in the frame, not a later fragment.
	HasTCP    bool
	TCPFlags  uint16 // the 12 bits after the data offset
	Length    uint16 // IPv4: total length; IPv6: see FlowPacketLength
	DSCP      uint8
	Frag      uint8 // FlowFrag* bits
	FlowLabel uint32
}

// Match evaluates c on value v: numeric when bitmask is false, else a
// bitmask match. Terms joined by FlowAnd form a conjunction; conjunctions
// are ORed.
func (c FlowComponent) Match(v uint64, bitmask bool) bool {
	any, run := false, true
	for i, t := range c {
		if i > 0 && t.Op&FlowAnd == 0 {
			any = any || run
			run = true
		}
		run = run && termMatch(t, v, bitmask)
	}
	return any || (len(c) > 0 && run)
}

func termMatch(t FlowTerm, v uint64, bitmask bool) bool {
	if bitmask {
		var m bool
		if t.Op&FlowMatch != 0 {
			m = v&t.Value == t.Value
		} else {
			m = v&t.Value != 0
		}
		if t.Op&FlowNot != 0 {
			m = !m
		}
		return m
	}
	switch {
	case v < t.Value:
		return t.Op&FlowLT != 0
	case v > t.Value:
		return t.Op&FlowGT != 0
	default:
		return t.Op&FlowEQ != 0
	}
}

// fragment is the rule's fragment component as it is matched: for IPv6,
// without the DF bit, which RFC 8956 §3.6 leaves reserved (0 when encoded,
// ignored when decoded): IPv6 has no don't-fragment bit.
func (r *FlowRule) fragment() FlowComponent {
	if !r.IPv6 || r.Fragment == nil {
		return r.Fragment
	}
	c := make(FlowComponent, len(r.Fragment))
	for i, t := range r.Fragment {
		t.Value &^= FlowFragDF
		c[i] = t
	}
	return c
}

// Matches reports whether r matches f. A component whose field the frame
// does not carry (ports of a frame that is not TCP or UDP, or a later
// fragment; ICMP fields of another protocol; TCP flags of another) does
// not match; a rule of the other family matches nothing.
func (r *FlowRule) Matches(f FlowFrame) bool {
	if r.IPv6 != f.IPv6 {
		return false
	}
	if r.Dst != nil && !r.Dst.Match(f.Dst) || r.Src != nil && !r.Src.Match(f.Src) {
		return false
	}
	if r.Proto != nil && !r.Proto.Match(uint64(f.Proto), false) {
		return false
	}
	if r.Port != nil || r.DstPort != nil || r.SrcPort != nil {
		if !f.HasPorts {
			return false
		}
		if r.Port != nil && !r.Port.Match(uint64(f.SrcPort), false) && !r.Port.Match(uint64(f.DstPort), false) {
			return false
		}
		if r.DstPort != nil && !r.DstPort.Match(uint64(f.DstPort), false) ||
			r.SrcPort != nil && !r.SrcPort.Match(uint64(f.SrcPort), false) {
			return false
		}
	}
	if r.ICMPType != nil || r.ICMPCode != nil {
		if !f.HasICMP {
			return false
		}
		if r.ICMPType != nil && !r.ICMPType.Match(uint64(f.ICMPType), false) ||
			r.ICMPCode != nil && !r.ICMPCode.Match(uint64(f.ICMPCode), false) {
			return false
		}
	}
	if r.TCPFlags != nil && (!f.HasTCP || !r.TCPFlags.Match(uint64(f.TCPFlags), true)) {
		return false
	}
	if r.PacketLength != nil && !r.PacketLength.Match(uint64(f.Length), false) {
		return false
	}
	if r.DSCP != nil && !r.DSCP.Match(uint64(f.DSCP), false) {
		return false
	}
	if frag := r.fragment(); frag != nil && !frag.Match(uint64(f.Frag), true) {
		return false
	}
	if r.FlowLabel != nil && (!f.IPv6 || !r.FlowLabel.Match(uint64(f.FlowLabel), false)) {
		return false
	}
	return true
}

// Bounds of FlowSpec rule sets.
const (
	// FlowMaxRules is the most rules of a family the engine holds.
	FlowMaxRules = 1024
	// FlowChain is the most rules that apply to one frame: the first it
	// matches and, while each has Continue, the next ones it matches.
	FlowChain = 8
)

// flowPeerRecord is the bytes of a peer's record in flowspec_peers: the
// time it was written (unix ns), its length, and that many bytes.
const flowPeerRecord = 1024

// FlowMaxPeers is the most peer records flowspec_peers holds.
const FlowMaxPeers = 16

// FlowExpressible reports why the engine cannot enforce r (nil when it can):
// the receiver refuses such a rule whole, never half applied.
func FlowExpressible(r *FlowRule) error {
	if r.Dst != nil && r.Dst.Prefix.Addr().Is6() != r.IPv6 || r.Src != nil && r.Src.Prefix.Addr().Is6() != r.IPv6 {
		return fmt.Errorf("a prefix of the other family")
	}
	if !r.IPv6 && (r.FlowLabel != nil || r.Dst != nil && r.Dst.Offset != 0 || r.Src != nil && r.Src.Offset != 0) {
		return fmt.Errorf("an IPv6 component (flow label, prefix offset) in an IPv4 rule")
	}
	for _, p := range []*FlowPrefix{r.Dst, r.Src} {
		if p != nil && int(p.Offset) > p.Prefix.Bits() {
			return fmt.Errorf("a prefix offset %d past its length %d", p.Offset, p.Prefix.Bits())
		}
	}
	if r.Action == FlowLimit && !(r.Rate > 0) {
		return fmt.Errorf("a rate limit of %v", r.Rate)
	}
	return nil
}
