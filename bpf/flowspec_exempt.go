//go:build linux

package bpf

import (
	"encoding/binary"
	"fmt"
)

// checkExempt: at most FlowExemptMax sessions, each an address and a port.
func (c FlowSpecConfig) checkExempt() error {
	if len(c.Exempt) > FlowExemptMax {
		return fmt.Errorf("flowspec: %d BGP sessions to exempt from the rules; at most %d (flowspec.peer: take the rules from fewer peers)", len(c.Exempt), FlowExemptMax)
	}
	for _, a := range c.Exempt {
		if !a.IsValid() || a.Port() == 0 {
			return fmt.Errorf("flowspec: the BGP session %s to exempt from the rules needs an address and a port", a)
		}
	}
	return nil
}

// exempt is c.Exempt as the program reads it.
func (c FlowSpecConfig) exempt() (n uint32, out [FlowExemptMax]xdpDropFsExempt) {
	for i, ap := range c.Exempt {
		a := ap.Addr().Unmap()
		var b [16]byte
		if a.Is4() {
			v4 := a.As4()
			copy(b[:], v4[:])
		} else {
			b = a.As16()
			out[i].V6 = 1
		}
		for w := range out[i].Addr {
			out[i].Addr[w] = binary.NativeEndian.Uint32(b[4*w:]) // network order in memory
		}
		out[i].Port = ap.Port()
	}
	return uint32(len(c.Exempt)), out
}
