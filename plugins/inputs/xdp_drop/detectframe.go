package xdp_drop

import (
	"encoding/binary"
	"net/netip"

	"github.com/xdp-drop/xdp_drop/internal/detect"
)

// detectFrame reads what the detection needs of a sampled frame, under up
// to two VLAN tags: its source and destination, and the ports of a TCP or
// UDP header in the sample (none of a later fragment, of an IPv6 frame
// with extension headers, or cut off by capture_snaplen: such a frame
// proves nothing). Length and protocol are the caller's.
func detectFrame(b []byte) (detect.Frame, bool) {
	be := binary.BigEndian
	off := 12
	if len(b) < off+2 {
		return detect.Frame{}, false
	}
	et := be.Uint16(b[off:])
	for i := 0; i < 2 && (et == 0x8100 || et == 0x88a8); i++ {
		off += 4
		if len(b) < off+2 {
			return detect.Frame{}, false
		}
		et = be.Uint16(b[off:])
	}
	off += 2
	var f detect.Frame
	var l4 int
	var proto uint8
	switch {
	case et == 0x0800 && len(b) >= off+20:
		f.Src = netip.AddrFrom4([4]byte(b[off+12 : off+16]))
		f.Dst = netip.AddrFrom4([4]byte(b[off+16 : off+20]))
		proto = b[off+9]
		if be.Uint16(b[off+6:])&0x1fff == 0 { // the first fragment, or none
			l4 = off + int(b[off]&0x0f)*4
		}
	case et == 0x0800 && len(b) >= off+16:
		f.Src = netip.AddrFrom4([4]byte(b[off+12 : off+16]))
		return f, true
	case et == 0x86dd && len(b) >= off+40:
		f.Src = netip.AddrFrom16([16]byte(b[off+8 : off+24]))
		f.Dst = netip.AddrFrom16([16]byte(b[off+24 : off+40]))
		proto = b[off+6]
		l4 = off + 40
	case et == 0x86dd && len(b) >= off+24:
		f.Src = netip.AddrFrom16([16]byte(b[off+8 : off+24]))
		return f, true
	default:
		return detect.Frame{}, false
	}
	if (proto == 6 || proto == 17) && l4 > off && len(b) >= l4+4 {
		f.SPort, f.DPort = be.Uint16(b[l4:]), be.Uint16(b[l4+2:])
	} else {
		f.Dst = netip.Addr{} // no flow to verify
	}
	return f, true
}
