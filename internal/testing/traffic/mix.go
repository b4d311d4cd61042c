// Package traffic is the standard traffic mix of the tests, the demo, the
// benchmarks and the end-to-end run: one flow per common class, and what
// the XDP program must count for it. Package txgen sends it.
package traffic

import (
	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// Flow is a number of copies of one frame, and the class the XDP program
// must count it under.
type Flow struct {
	Name  string
	Frame []byte
	Count int
	Class bpf.Class
}

// Mix is a traffic mix with one flow per common class, each with a distinct
// count so that a frame counted under the wrong class shows.
func Mix() []Flow {
	q := frames.Tag{TPID: frames.Ether8021Q, VID: 100}
	ad := frames.Tag{TPID: frames.Ether8021AD, VID: 200}
	return []Flow{
		{"ipv4/tcp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(6))), 40, bpf.IPv4Class(frames.ProtoTCP)},
		{"ipv4/udp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18))), 50, bpf.IPv4Class(frames.ProtoUDP)},
		{"ipv4/icmp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoICMP, 0, frames.ICMPEcho(false, 56))), 30, bpf.IPv4Class(frames.ProtoICMP)},
		{"ipv6/tcp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoTCP, frames.TCP(0))), 20, bpf.IPv6Class(frames.ProtoTCP)},
		{"ipv6/udp via hop-by-hop", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoHopOpts, frames.Ext(frames.ProtoHopOpts, frames.ProtoUDP, 8, frames.UDP(8)))), 25, bpf.IPv6Class(frames.ProtoUDP)},
		{"ipv6/ipv6-icmp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoICMPv6, frames.ICMPEcho(true, 56))), 15, bpf.IPv6Class(frames.ProtoICMPv6)},
		{"arp", frames.Ether(frames.EtherARP, frames.ARPRequest()), 6, bpf.ClassL2ARP},
		{"802.1q ipv4/udp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)), q), 12, bpf.IPv4Class(frames.ProtoUDP)},
		{"qinq ipv4/gre", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoGRE, 0, frames.Pad(24)), ad, q), 8, bpf.IPv4Class(frames.ProtoGRE)},
		{"lldp", frames.Ether(frames.EtherLLDP, frames.Pad(46)), 4, bpf.ClassL2Other},
	}
}

// Expected sums a mix into per-class counters.
func Expected(flows []Flow) bpf.Counters {
	var c bpf.Counters
	for _, f := range flows {
		c[f.Class].Packets += uint64(f.Count)
		c[f.Class].Bytes += uint64(f.Count * len(f.Frame))
	}
	return c
}

// Total is the number of frames in a mix.
func Total(flows []Flow) int {
	n := 0
	for _, f := range flows {
		n += f.Count
	}
	return n
}
