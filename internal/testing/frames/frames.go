// Package frames builds Ethernet frames by hand, inside out, for tests,
// benchmarks and the demo: the payload first, then each header around it.
package frames

import (
	"bytes"
	"encoding/binary"
	"net/netip"
)

// Ethertypes.
const (
	EtherIPv4   = 0x0800
	EtherARP    = 0x0806
	EtherIPv6   = 0x86DD
	Ether8021Q  = 0x8100
	Ether8021AD = 0x88A8
	EtherLLDP   = 0x88CC
)

// IP protocol numbers used by the builders.
const (
	ProtoHopOpts  = 0
	ProtoICMP     = 1
	ProtoTCP      = 6
	ProtoUDP      = 17
	ProtoRouting  = 43
	ProtoFragment = 44
	ProtoGRE      = 47
	ProtoESP      = 50
	ProtoAH       = 51
	ProtoICMPv6   = 58
	ProtoNoNext   = 59
	ProtoDstOpts  = 60
	ProtoSCTP     = 132
)

// Locally administered addresses: the receiving stack sees the frames as
// meant for another host and answers none of them.
var (
	DstMAC = [6]byte{0x02, 0, 0, 0, 0, 0x02}
	SrcMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}
)

// Tag is one VLAN tag: its TPID (0x8100 or 0x88A8) and VLAN id.
type Tag struct {
	TPID uint16
	VID  uint16
}

// Ether wraps l3 in an Ethernet header with the given VLAN tags, outermost first.
func Ether(ethertype uint16, l3 []byte, tags ...Tag) []byte {
	b := make([]byte, 0, 14+4*len(tags)+len(l3))
	b = append(b, DstMAC[:]...)
	b = append(b, SrcMAC[:]...)
	for _, t := range tags {
		b = binary.BigEndian.AppendUint16(b, t.TPID)
		b = binary.BigEndian.AppendUint16(b, t.VID&0x0fff)
	}
	b = binary.BigEndian.AppendUint16(b, ethertype)
	return append(b, l3...)
}

// IPv4 builds an IPv4 header with optLen bytes of options (a multiple of 4,
// at most 40) around payload.
func IPv4(proto uint8, optLen int, payload []byte) []byte {
	hl := 20 + optLen
	b := make([]byte, hl, hl+len(payload))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hl+len(payload)))
	b[8] = 64
	b[9] = proto
	copy(b[12:16], []byte{192, 0, 2, 1})
	copy(b[16:20], []byte{192, 0, 2, 2})
	for i := 20; i < hl; i++ {
		b[i] = 1 // NOP options
	}
	binary.BigEndian.PutUint16(b[10:], checksum(b))
	return append(b, payload...)
}

// IPv6 builds an IPv6 header whose next header is next around payload (which
// holds any extension headers, then the upper layer).
func IPv6(next uint8, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = next
	b[7] = 64
	copy(b[8:24], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
	copy(b[24:40], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
	return append(b, payload...)
}

// Ext builds an IPv6 hop-by-hop, routing, destination options or AH
// extension header of size bytes (a multiple of 8; of 4 for AH, at least 8)
// whose next header is next, in front of rest.
func Ext(kind, next uint8, size int, rest []byte) []byte {
	b := make([]byte, size, size+len(rest))
	b[0] = next
	if kind == ProtoAH {
		b[1] = byte(size/4 - 2)
	} else {
		b[1] = byte(size/8 - 1)
	}
	if kind == ProtoRouting {
		b[2] = 4 // segment routing type; segments left 0
	}
	if kind == ProtoHopOpts || kind == ProtoDstOpts {
		b[2] = 1 // PadN over the rest
		b[3] = byte(size - 4)
	}
	return append(b, rest...)
}

// Frag builds an IPv6 fragment header naming next, at fragment offset offset
// (in 8-byte units), in front of rest.
func Frag(next uint8, offset uint16, more bool, rest []byte) []byte {
	b := make([]byte, 8, 8+len(rest))
	b[0] = next
	fo := offset << 3
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(b[2:], fo)
	binary.BigEndian.PutUint32(b[4:], 0x1234)
	return append(b, rest...)
}

// UDP builds a UDP header and n payload bytes.
func UDP(n int) []byte {
	b := make([]byte, 8+n)
	binary.BigEndian.PutUint16(b[0:], 40000)
	binary.BigEndian.PutUint16(b[2:], 9)
	binary.BigEndian.PutUint16(b[4:], uint16(8+n))
	return b
}

// TCP builds a 20-byte TCP SYN header and n payload bytes.
func TCP(n int) []byte {
	b := make([]byte, 20+n)
	binary.BigEndian.PutUint16(b[0:], 40000)
	binary.BigEndian.PutUint16(b[2:], 9)
	b[12] = 5 << 4
	b[13] = 0x02
	binary.BigEndian.PutUint16(b[14:], 65535)
	return b
}

// ICMPEcho builds an ICMP (or ICMPv6) echo request with n payload bytes.
func ICMPEcho(v6 bool, n int) []byte {
	b := make([]byte, 8+n)
	b[0] = 8
	if v6 {
		b[0] = 128
	}
	return b
}

// ARPRequest builds an ARP who-has for 192.0.2.2.
func ARPRequest() []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(b[2:], 0x0800) // IPv4
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], 1) // request
	copy(b[8:14], SrcMAC[:])
	copy(b[14:18], []byte{192, 0, 2, 1})
	copy(b[24:28], []byte{192, 0, 2, 2})
	return b
}

// Pad returns n bytes, for frames that need a given length.
func Pad(n int) []byte { return make([]byte, n) }

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Addressed sets the source and destination addresses of an IPv4 packet
// (with IPv4 addresses) or an IPv6 packet (with IPv6 ones).
func Addressed(l3 []byte, src, dst netip.Addr) []byte {
	b := bytes.Clone(l3)
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		copy(b[12:16], s[:])
		copy(b[16:20], d[:])
		hl := int(b[0]&0x0f) * 4
		binary.BigEndian.PutUint16(b[10:], 0)
		binary.BigEndian.PutUint16(b[10:], checksum(b[:hl]))
		return b
	}
	s, d := src.As16(), dst.As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	return b
}

// Ports sets the source and destination ports of a TCP, UDP or SCTP header.
func Ports(l4 []byte, src, dst uint16) []byte {
	b := bytes.Clone(l4)
	binary.BigEndian.PutUint16(b[0:], src)
	binary.BigEndian.PutUint16(b[2:], dst)
	return b
}
