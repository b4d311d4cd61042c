package main

import (
	"fmt"
	"net/netip"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// The FlowSpec section's addresses: each rule names a destination of its
// own in 198.18.0.0/15 (the benchmarking range), counted up from
// 198.18.0.1; the frame that matches no rule goes to flowMissDst, the
// frames come from flowSrc.
var (
	flowFirstDst = netip.MustParseAddr("198.18.0.1")
	flowMissDst  = netip.MustParseAddr("198.19.0.1")
	flowSrc      = netip.MustParseAddr("203.0.113.7")
	flowDstRange = netip.MustParsePrefix("198.18.0.0/15")
)

// flowRuleDst is the destination of rule i of a bench set.
func flowRuleDst(i int) netip.Addr {
	a := flowFirstDst.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// benchFlowRules is a set of n IPv4 FlowSpec drop rules, each for a
// destination of its own (a /32), of four kinds in turn, the last rule of
// the first kind:
//
//	0: destination D/32 protocol ==17 source-port ==123 packet-length >=400 (NTP reflection, the done-test's rule)
//	1: destination D/32 protocol ==17 source-port ==53 packet-length >=512&<=1500 (DNS reflection)
//	2: destination D/32 protocol ==6 destination-port ==80 ==443 tcp-flags =syn&!=ack (a SYN flood)
//	3: destination D/32 protocol ==17 destination-port >=1000&<=1999 (a port range)
func benchFlowRules(n int) []bpf.FlowRule {
	eq := func(v uint64) bpf.FlowComponent { return bpf.FlowComponent{{Op: bpf.FlowEQ, Value: v}} }
	ge := bpf.FlowGT | bpf.FlowEQ
	le := bpf.FlowLT | bpf.FlowEQ
	rules := make([]bpf.FlowRule, n)
	for i := range rules {
		r := &rules[i]
		r.ID = fmt.Sprintf("bench%04d", i)
		r.Dst = &bpf.FlowPrefix{Prefix: netip.PrefixFrom(flowRuleDst(i), 32)}
		r.Action = bpf.FlowDrop
		switch (n - 1 - i) % 4 {
		case 0:
			r.Proto, r.SrcPort = eq(frames.ProtoUDP), eq(123)
			r.PacketLength = bpf.FlowComponent{{Op: ge, Value: 400}}
		case 1:
			r.Proto, r.SrcPort = eq(frames.ProtoUDP), eq(53)
			r.PacketLength = bpf.FlowComponent{{Op: ge, Value: 512}, {Op: bpf.FlowAnd | le, Value: 1500}}
		case 2:
			r.Proto = eq(frames.ProtoTCP)
			r.DstPort = bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 80}, {Op: bpf.FlowEQ, Value: 443}}
			r.TCPFlags = bpf.FlowComponent{{Op: bpf.FlowMatch, Value: 0x02}, {Op: bpf.FlowAnd | bpf.FlowNot | bpf.FlowMatch, Value: 0x10}}
		case 3:
			r.Proto = eq(frames.ProtoUDP)
			r.DstPort = bpf.FlowComponent{{Op: ge, Value: 1000}, {Op: bpf.FlowAnd | le, Value: 1999}}
		}
	}
	return rules
}

// flowFrame is the section's frame: an NTP reflection (UDP from port 123,
// IP total length 468) from flowSrc to dst.
func flowFrame(dst netip.Addr) []byte {
	udp := frames.Ports(frames.UDP(440), 123, 40000)
	return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, udp), flowSrc, dst))
}

// flowFrameOf reads what the engine reads of flowFrame(dst).
func flowFrameOf(dst netip.Addr) bpf.FlowFrame {
	return bpf.FlowFrame{Src: flowSrc, Dst: dst, Proto: frames.ProtoUDP, HasPorts: true, SrcPort: 123, DstPort: 40000, Length: 468}
}
