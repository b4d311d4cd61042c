package flowspec

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// compareRules orders two rules as RFC 8955 §5.1 (and RFC 8956 §4 for
// IPv6 prefix offsets) does: negative when a has precedence (goes first).
// Components are compared in type order; a rule with a component the
// other lacks (at the first type where they differ) goes first. Prefixes:
// the lower offset first; then, over their common length, the lower
// value first, and with equal common bits the longer (more specific)
// first. Other components: memcmp of their wire bytes over the common
// length, the lower first, and with an equal common part the longer
// first. IPv4 rules come before IPv6 ones (the families never match the
// same frame).
func compareRules(a, b *received) int {
	if a.rule.IPv6 != b.rule.IPv6 {
		if !a.rule.IPv6 {
			return -1
		}
		return 1
	}
	for t := 1; t <= 13; t++ {
		ca, cb := a.comps[t], b.comps[t]
		switch {
		case ca == nil && cb == nil:
			continue
		case cb == nil:
			return -1
		case ca == nil:
			return 1
		}
		var c int
		if t <= 2 {
			c = comparePrefix(prefixOf(&a.rule, t), prefixOf(&b.rule, t))
		} else {
			c = compareBytes(ca, cb)
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func prefixOf(r *bpf.FlowRule, t int) *bpf.FlowPrefix {
	if t == 1 {
		return r.Dst
	}
	return r.Src
}

func comparePrefix(a, b *bpf.FlowPrefix) int {
	if a.Offset != b.Offset {
		if a.Offset < b.Offset {
			return -1
		}
		return 1
	}
	common := min(a.Prefix.Bits(), b.Prefix.Bits())
	x, y := a.Prefix.Addr().AsSlice(), b.Prefix.Addr().AsSlice()
	for i := int(a.Offset); i < common; i++ {
		bit := byte(0x80) >> (i % 8)
		bx, by := x[i/8]&bit, y[i/8]&bit
		if bx != by {
			if bx < by {
				return -1
			}
			return 1
		}
	}
	switch {
	case a.Prefix.Bits() > b.Prefix.Bits():
		return -1
	case a.Prefix.Bits() < b.Prefix.Bits():
		return 1
	}
	return 0
}

// compareBytes: memcmp over the common length, the lower first; equal
// there, the longer string first.
func compareBytes(a, b []byte) int {
	n := min(len(a), len(b))
	if c := bytes.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	switch {
	case len(a) > len(b):
		return -1
	case len(a) < len(b):
		return 1
	}
	return 0
}

// encodeComponents is the wire encoding of r's components after their
// type octet, values in the fewest octets that hold them (as GoBGP and
// ExaBGP send them): the ordering key of a rule known only as a
// bpf.FlowRule (one handed over by a predecessor).
func encodeComponents(r *bpf.FlowRule) [14][]byte {
	var out [14][]byte
	for t := 1; t <= 13; t++ {
		switch t {
		case 1, 2:
			p := prefixOf(r, t)
			if p == nil {
				continue
			}
			n := p.Prefix.Bits()
			buf := []byte{byte(n)}
			if r.IPv6 {
				buf = append(buf, p.Offset)
			}
			out[t] = append(buf, p.Prefix.Addr().AsSlice()[:(n+7)/8]...)
		default:
			c := componentOf(r, t)
			if c == nil {
				continue
			}
			var buf []byte
			for i, term := range c {
				op, v := term.Op, term.Value
				if i == len(c)-1 {
					op |= opEnd
				}
				size := 1
				for size < 8 && bits.Len64(v) > size*8 {
					size *= 2
				}
				op |= byte(bits.TrailingZeros(uint(size))) << 4
				var val [8]byte
				binary.BigEndian.PutUint64(val[:], v)
				buf = append(append(buf, op), val[8-size:]...)
			}
			out[t] = buf
		}
	}
	return out
}
