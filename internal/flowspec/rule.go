package flowspec

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// Refusal reasons (the points' refused_<key> fields).
const (
	ReasonOnlyLocal   = "only_local_destinations"
	ReasonMaxRules    = "max_rules"
	ReasonAction      = "action"
	ReasonUnsupported = "unsupported"
	ReasonMalformed   = "malformed"
	// ReasonCapacity: the engine had no room for the rule (its tables
	// full); it is passed again with every later change of the set.
	ReasonCapacity = "capacity"
)

// Reasons lists every refusal reason key, for callers that report all of them.
var Reasons = []string{ReasonOnlyLocal, ReasonMaxRules, ReasonAction, ReasonUnsupported, ReasonMalformed, ReasonCapacity}

// received is one NLRI with the actions of its best path, decoded.
type received struct {
	rule bpf.FlowRule
	// comps are the components' wire bytes after their type octet, by
	// type (index 1..13): what RFC 8955 §5.1 compares.
	comps [14][]byte
	// extra names actions the host cannot honour (text only).
	extra []string
	// refused is the reason known from the NLRI and its attributes alone.
	refused string
	detail  string
	text    string
}

// Operator octet bits on the wire besides the ones FlowTerm keeps.
const (
	opEnd     = 0x80
	opLenMask = 0x30
)

// decode turns a FlowSpec NLRI and its path attributes into a rule. A
// rule it cannot decode exactly is returned refused (malformed,
// unsupported, action), never partly converted.
func decode(nlri bgp.AddrPrefixInterface, attrs []bgp.PathAttributeInterface, sampling bool) *received {
	r := &received{}
	var comps []bgp.FlowSpecComponentInterface
	switch n := nlri.(type) {
	case *bgp.FlowSpecIPv4Unicast:
		comps = n.Value
	case *bgp.FlowSpecIPv6Unicast:
		comps, r.rule.IPv6 = n.Value, true
	default:
		r.refused, r.detail = ReasonMalformed, fmt.Sprintf("not a FlowSpec NLRI: %T", nlri)
		return r
	}
	if err := r.decodeComponents(comps); err != nil {
		r.refused, r.detail = ReasonMalformed, err.Error()
	}
	reason, detail := r.decodeActions(attrs, sampling)
	r.text = canonicalText(&r.rule, r.extra)
	if r.refused == "" {
		r.refused, r.detail = offsetRefusal(&r.rule)
	}
	if r.refused == "" {
		r.refused, r.detail = reason, detail
	}
	if r.refused == "" {
		if err := bpf.FlowExpressible(&r.rule); err != nil {
			r.refused, r.detail = ReasonUnsupported, err.Error()
		}
	}
	r.rule.ID, r.rule.Text = ruleID(r.text), r.text
	return r
}

// offsetRefusal refuses an IPv6 prefix with a non-zero offset. GoBGP
// decodes such a component by draft-ietf-idr-flow-spec-v6-06 (the prefix's
// first ceil(length/8) octets after the offset octet), as ExaBGP 4 and
// GoBGP encode it; RFC 8956 speakers (routers, ExaBGP 5) send only the
// ceil((length-offset)/8) octets of the pattern, so GoBGP reads octets of
// the next component (or of the next NLRI of the UPDATE, which it then
// reads shifted) into the prefix. Which of the two a peer sent cannot be
// told from what GoBGP keeps: the rule is refused, never enforced as a
// pattern it may not be. An offset of 0 encodes alike in both.
func offsetRefusal(rule *bpf.FlowRule) (string, string) {
	for _, p := range []struct {
		name string
		pfx  *bpf.FlowPrefix
	}{{"destination", rule.Dst}, {"source", rule.Src}} {
		if p.pfx != nil && p.pfx.Offset != 0 {
			return ReasonUnsupported, fmt.Sprintf("IPv6 %s prefix offset %d: the receiver's BGP library decodes offsets by an old draft's encoding, not RFC 8956's, so the pattern may be misread; only offset 0 is accepted", p.name, p.pfx.Offset)
		}
	}
	return "", ""
}

func (r *received) decodeComponents(comps []bgp.FlowSpecComponentInterface) error {
	last := 0
	for _, c := range comps {
		t := int(c.Type())
		if _, unknown := c.(*bgp.FlowSpecUnknown); unknown {
			return fmt.Errorf("component type %d could not be decoded", t)
		}
		maxType := 12
		if r.rule.IPv6 {
			maxType = 13
		}
		if t < 1 || t > maxType {
			return fmt.Errorf("unknown component type %d", t)
		}
		if t <= last {
			// GoBGP sorts the components by type, so this is a duplicate.
			return fmt.Errorf("component type %d more than once", t)
		}
		last = t
		wire, err := c.Serialize()
		if err != nil || len(wire) < 2 {
			return fmt.Errorf("component type %d: %v", t, err)
		}
		r.comps[t] = wire[1:]
		switch v := c.(type) {
		case *bgp.FlowSpecDestinationPrefix:
			p, err := prefix4(v.Prefix)
			if err != nil {
				return err
			}
			r.rule.Dst = p
		case *bgp.FlowSpecSourcePrefix:
			p, err := prefix4(v.Prefix)
			if err != nil {
				return err
			}
			r.rule.Src = p
		case *bgp.FlowSpecDestinationPrefix6:
			p, err := prefix6(v.Prefix, v.Offset)
			if err != nil {
				return err
			}
			r.rule.Dst = p
		case *bgp.FlowSpecSourcePrefix6:
			p, err := prefix6(v.Prefix, v.Offset)
			if err != nil {
				return err
			}
			r.rule.Src = p
		case *bgp.FlowSpecComponent:
			if err := r.setComponent(t, v.Items); err != nil {
				return err
			}
		default:
			return fmt.Errorf("component type %d of an unexpected kind %T", t, c)
		}
	}
	return nil
}

func prefix4(p bgp.AddrPrefixInterface) (*bpf.FlowPrefix, error) {
	a, ok := p.(*bgp.IPAddrPrefix)
	if !ok {
		return nil, fmt.Errorf("an IPv4 prefix of kind %T", p)
	}
	addr, ok := netip.AddrFromSlice(a.Prefix.To4())
	if !ok || a.Length > 32 {
		return nil, fmt.Errorf("an IPv4 prefix %v/%d", a.Prefix, a.Length)
	}
	pfx, err := addr.Prefix(int(a.Length))
	if err != nil {
		return nil, err
	}
	return &bpf.FlowPrefix{Prefix: pfx}, nil
}

// prefix6 reads an IPv6 prefix with its offset: the bits before the offset
// are cleared, as FlowPrefix wants them.
func prefix6(p bgp.AddrPrefixInterface, offset uint8) (*bpf.FlowPrefix, error) {
	a, ok := p.(*bgp.IPv6AddrPrefix)
	if !ok {
		return nil, fmt.Errorf("an IPv6 prefix of kind %T", p)
	}
	addr, ok := netip.AddrFromSlice(a.Prefix.To16())
	if !ok || a.Length > 128 {
		return nil, fmt.Errorf("an IPv6 prefix %v/%d", a.Prefix, a.Length)
	}
	if offset > a.Length {
		return nil, fmt.Errorf("an IPv6 prefix offset %d past its length %d", offset, a.Length)
	}
	pfx, err := addr.Prefix(int(a.Length))
	if err != nil {
		return nil, err
	}
	b := pfx.Addr().As16()
	for i := 0; i < int(offset); i++ {
		b[i/8] &^= 0x80 >> (i % 8)
	}
	return &bpf.FlowPrefix{Prefix: netip.PrefixFrom(netip.AddrFrom16(b), pfx.Bits()), Offset: offset}, nil
}

func (r *received) setComponent(t int, items []*bgp.FlowSpecComponentItem) error {
	if len(items) == 0 {
		return fmt.Errorf("component type %d with no operator", t)
	}
	c := make(bpf.FlowComponent, 0, len(items))
	for i, it := range items {
		if (it.Op&opEnd != 0) != (i == len(items)-1) {
			return fmt.Errorf("component type %d: end-of-list bit misplaced", t)
		}
		op := it.Op &^ (opEnd | opLenMask)
		if bitmaskType(t) {
			op &= bpf.FlowAnd | bpf.FlowNot | bpf.FlowMatch
		} else {
			op &= bpf.FlowAnd | bpf.FlowLT | bpf.FlowGT | bpf.FlowEQ
		}
		c = append(c, bpf.FlowTerm{Op: op, Value: it.Value})
	}
	switch t {
	case 3:
		r.rule.Proto = c
	case 4:
		r.rule.Port = c
	case 5:
		r.rule.DstPort = c
	case 6:
		r.rule.SrcPort = c
	case 7:
		r.rule.ICMPType = c
	case 8:
		r.rule.ICMPCode = c
	case 9:
		r.rule.TCPFlags = c
	case 10:
		r.rule.PacketLength = c
	case 11:
		r.rule.DSCP = c
	case 12:
		r.rule.Fragment = c
	case 13:
		r.rule.FlowLabel = c
	default:
		return fmt.Errorf("component type %d is not an operator list", t)
	}
	return nil
}

// bitmaskType: TCP flags and fragment use bitmask operators, the rest numeric ones.
func bitmaskType(t int) bool { return t == 9 || t == 12 }

// Extended community types and subtypes of FlowSpec actions (RFC 8955 §7,
// RFC 7674, draft-ietf-idr-flowspec-redirect-ip).
const (
	ecExperimental  = 0x80 // transitive experimental, 2-octet AS
	ecExperimental2 = 0x81 // IPv4 address specific redirect
	ecExperimental3 = 0x82 // 4-octet AS redirect
	ecRedirectIP    = 0x08 // redirect to IP next hop (draft)
	ecIPv4Specific  = 0x01

	subRateBytes   = 0x06
	subAction      = 0x07
	subRedirect    = 0x08
	subMarking     = 0x09
	subRatePackets = 0x0c
	subRedirectIP4 = 0x0c // in ecIPv4Specific (redirect-to-IPv4, draft)

	actionSample   = 0x02
	actionTerminal = 0x01
)

// decodeActions reads the FlowSpec actions of the path's extended
// communities. Communities of no FlowSpec meaning (route targets etc.)
// are ignored; a FlowSpec action the host cannot honour refuses the rule.
func (r *received) decodeActions(attrs []bgp.PathAttributeInterface, sampling bool) (string, string) {
	var rates []rate
	reason, detail := "", ""
	refuse := func(name string) {
		r.extra = append(r.extra, name)
		if reason == "" {
			reason, detail = ReasonAction, name+" has no meaning on a host"
		}
	}
	for _, a := range attrs {
		switch v := a.(type) {
		case *bgp.PathAttributeExtendedCommunities:
			for _, ec := range v.Value {
				b, err := ec.Serialize()
				if err != nil || len(b) != 8 {
					refuse("an undecodable extended community")
					continue
				}
				switch {
				case b[0] == ecExperimental && b[1] == subRateBytes:
					rates = append(rates, rate{math.Float32frombits(binary.BigEndian.Uint32(b[4:])), true})
				case b[0] == ecExperimental && b[1] == subRatePackets:
					rates = append(rates, rate{math.Float32frombits(binary.BigEndian.Uint32(b[4:])), false})
				case b[0] == ecExperimental && b[1] == subAction:
					if b[7]&actionSample != 0 {
						r.rule.Sample = true
					}
					if b[7]&actionTerminal != 0 {
						r.rule.Continue = true
					}
				case (b[0] == ecExperimental || b[0] == ecExperimental2 || b[0] == ecExperimental3) && b[1] == subRedirect:
					refuse(fmt.Sprintf("redirect %s", redirectTarget(b)))
				case b[0] == ecExperimental && b[1] == subMarking:
					refuse(fmt.Sprintf("mark %d", b[7]&0x3f))
				case b[0] == ecRedirectIP && b[1] == 0x00, b[0] == ecIPv4Specific && b[1] == subRedirectIP4:
					refuse("redirect-to-ip")
				case b[0] == ecExperimental || b[0] == ecExperimental2 || b[0] == ecExperimental3:
					refuse(fmt.Sprintf("action 0x%02x%02x", b[0], b[1]))
				}
			}
		case *bgp.PathAttributeIP6ExtendedCommunities:
			for _, ec := range v.Value {
				if _, sub := ec.GetTypes(); sub == 0x0b || sub == 0x0c || sub == 0x0d {
					refuse("redirect-to-ipv6")
				}
			}
		}
	}
	switch len(rates) {
	case 0:
		r.rule.Action = bpf.FlowAccept
	case 1:
		r.rule.Rate, r.rule.RateBytes = float64(rates[0].v), rates[0].bytes
		r.rule.Action = bpf.FlowLimit
		if rates[0].v == 0 {
			// A drop, of bytes or packets alike.
			r.rule.Action, r.rule.Rate, r.rule.RateBytes = bpf.FlowDrop, 0, false
		}
	default:
		// Several rates: 0 in any drops; two non-zero ones the engine cannot combine.
		for _, x := range rates {
			if x.v == 0 {
				r.rule.Action, r.rule.Rate, r.rule.RateBytes = bpf.FlowDrop, 0, false
				return reason, detail
			}
		}
		r.rule.Action, r.rule.Rate, r.rule.RateBytes = bpf.FlowLimit, float64(rates[0].v), rates[0].bytes
		if reason == "" {
			reason, detail = ReasonUnsupported, "more than one traffic-rate"
		}
	}
	if r.rule.Sample && !sampling && reason == "" {
		reason, detail = ReasonAction, "sample with no sampling configured"
	}
	return reason, detail
}

type rate struct {
	v     float32
	bytes bool
}

func redirectTarget(b []byte) string {
	switch b[0] {
	case ecExperimental:
		return fmt.Sprintf("%d:%d", binary.BigEndian.Uint16(b[2:4]), binary.BigEndian.Uint32(b[4:8]))
	case ecExperimental2:
		return fmt.Sprintf("%d.%d.%d.%d:%d", b[2], b[3], b[4], b[5], binary.BigEndian.Uint16(b[6:8]))
	default:
		return fmt.Sprintf("%d:%d", binary.BigEndian.Uint32(b[2:6]), binary.BigEndian.Uint16(b[6:8]))
	}
}
