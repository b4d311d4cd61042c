//go:build linux

package bpf_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

const (
	xdpDrop = 1
	xdpPass = 2
)

// listPolicy is the protocol-list policy every row is also run under.
var listProtocols = []uint8{frames.ProtoUDP, frames.ProtoICMP, frames.ProtoGRE}

type frameCase struct {
	name  string
	frame []byte
	class bpf.Class
}

func ipv4(proto uint8) bpf.Class { return bpf.IPv4Class(proto) }
func ipv6(proto uint8) bpf.Class { return bpf.IPv6Class(proto) }

// chain builds n IPv6 destination-options headers in a row, ending in UDP.
func chain(n int) []byte {
	b := frames.UDP(8)
	for i := 0; i < n; i++ {
		next := uint8(frames.ProtoDstOpts)
		if i == 0 {
			next = frames.ProtoUDP
		}
		b = frames.Ext(frames.ProtoDstOpts, next, 8, b)
	}
	return b
}

func withByte(b []byte, i int, v byte) []byte {
	c := bytes.Clone(b)
	c[i] = v
	return c
}

func frameCases() []frameCase {
	q := frames.Tag{TPID: frames.Ether8021Q, VID: 10}
	ad := frames.Tag{TPID: frames.Ether8021AD, VID: 20}
	udp4 := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	v6hop := frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoHopOpts, frames.Ext(frames.ProtoHopOpts, frames.ProtoUDP, 16, frames.UDP(8))))
	full := []frameCase{
		{"ipv4 udp", udp4, ipv4(17)},
		{"ipv4 tcp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(0))), ipv4(6)},
		{"ipv4 icmp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoICMP, 0, frames.ICMPEcho(false, 32))), ipv4(1)},
		{"ipv4 gre", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoGRE, 0, frames.Pad(24))), ipv4(47)},
		{"ipv4 esp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoESP, 0, frames.Pad(24))), ipv4(50)},
		{"ipv4 sctp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoSCTP, 0, frames.Pad(24))), ipv4(132)},
		{"ipv4 protocol 0", frames.Ether(frames.EtherIPv4, frames.IPv4(0, 0, frames.Pad(8))), ipv4(0)},
		{"ipv4 protocol 253", frames.Ether(frames.EtherIPv4, frames.IPv4(253, 0, frames.Pad(8))), ipv4(253)},
		{"ipv4 protocol 255", frames.Ether(frames.EtherIPv4, frames.IPv4(255, 0, frames.Pad(8))), ipv4(255)},
		{"ipv4 options 4 bytes", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 4, frames.UDP(8))), ipv4(17)},
		{"ipv4 options 40 bytes", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 40, frames.TCP(0))), ipv4(6)},
		{"ipv4 header only", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, nil)), ipv4(17)},
		{"ipv4 fragment later", frames.Ether(frames.EtherIPv4, withByte(frames.IPv4(frames.ProtoUDP, 0, frames.Pad(16)), 7, 0x40)), ipv4(17)},

		{"ipv6 udp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoUDP, frames.UDP(8))), ipv6(17)},
		{"ipv6 tcp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoTCP, frames.TCP(0))), ipv6(6)},
		{"ipv6 icmpv6", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoICMPv6, frames.ICMPEcho(true, 8))), ipv6(58)},
		{"ipv6 no next header", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoNoNext, nil)), ipv6(59)},
		{"ipv6 esp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoESP, frames.Pad(16))), ipv6(50)},
		{"ipv6 gre", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoGRE, frames.Pad(16))), ipv6(47)},
		{"ipv6 hop-by-hop", v6hop, ipv6(17)},
		{"ipv6 routing", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoRouting, frames.Ext(frames.ProtoRouting, frames.ProtoTCP, 24, frames.TCP(0)))), ipv6(6)},
		{"ipv6 destination options", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoDstOpts, frames.Ext(frames.ProtoDstOpts, frames.ProtoICMPv6, 8, frames.ICMPEcho(true, 0)))), ipv6(58)},
		{"ipv6 ah", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoAH, frames.Ext(frames.ProtoAH, frames.ProtoTCP, 24, frames.TCP(0)))), ipv6(6)},
		{"ipv6 ah 12 bytes", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoAH, frames.Ext(frames.ProtoAH, frames.ProtoUDP, 12, frames.UDP(0)))), ipv6(17)},
		{"ipv6 first fragment", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoFragment, frames.Frag(frames.ProtoUDP, 0, true, frames.UDP(16)))), ipv6(17)},
		// A later fragment names its protocol though its payload holds no header;
		// naming an extension header there must not send the parser into payload.
		{"ipv6 later fragment", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoFragment, frames.Frag(frames.ProtoUDP, 100, false, frames.Pad(3)))), ipv6(17)},
		{"ipv6 later fragment naming dstopts", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoFragment, frames.Frag(frames.ProtoDstOpts, 100, false, frames.Pad(3)))), ipv6(60)},
		{"ipv6 chain of six", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoHopOpts,
			frames.Ext(frames.ProtoHopOpts, frames.ProtoDstOpts, 8,
				frames.Ext(frames.ProtoDstOpts, frames.ProtoRouting, 16,
					frames.Ext(frames.ProtoRouting, frames.ProtoFragment, 24,
						frames.Frag(frames.ProtoAH, 0, true,
							frames.Ext(frames.ProtoAH, frames.ProtoDstOpts, 16,
								frames.Ext(frames.ProtoDstOpts, frames.ProtoSCTP, 8, frames.Pad(12))))))))), ipv6(132)},
		{"ipv6 chain at bound", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoDstOpts, chain(8))), ipv6(17)},
		{"ipv6 chain past bound", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoDstOpts, chain(9))), ipv6(60)},

		{"802.1q ipv4 udp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), q), ipv4(17)},
		{"802.1ad ipv6 tcp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoTCP, frames.TCP(0)), ad), ipv6(6)},
		{"802.1ad+802.1q ipv4 udp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), ad, q), ipv4(17)},
		{"802.1q+802.1ad ipv4 icmp", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoICMP, 0, frames.ICMPEcho(false, 8)), q, ad), ipv4(1)},
		{"802.1q+802.1q ipv6 udp", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoUDP, frames.UDP(8)), q, q), ipv6(17)},
		{"two tags arp", frames.Ether(frames.EtherARP, frames.ARPRequest(), ad, q), bpf.ClassL2ARP},
		{"three tags", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), ad, q, q), bpf.ClassL2VLANOverflow},

		{"arp", frames.Ether(frames.EtherARP, frames.ARPRequest()), bpf.ClassL2ARP},
		{"lldp", frames.Ether(frames.EtherLLDP, frames.Pad(46)), bpf.ClassL2Other},
		{"ethertype 0", frames.Ether(0, frames.Pad(46)), bpf.ClassL2Other},
		{"14-byte frame", frames.Ether(0x1234, nil), bpf.ClassL2Other},
		{"14-byte ipv4", frames.Ether(frames.EtherIPv4, nil), bpf.ClassIPv4Truncated},
		{"14-byte ipv6", frames.Ether(frames.EtherIPv6, nil), bpf.ClassIPv6Truncated},
		{"14-byte vlan", frames.Ether(frames.Ether8021Q, nil), bpf.ClassL2Truncated},
		{"ipv4 ihl 4", frames.Ether(frames.EtherIPv4, withByte(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), 0, 0x44)), bpf.ClassIPv4Truncated},
		{"ipv4 ihl 0", frames.Ether(frames.EtherIPv4, withByte(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), 0, 0x40)), bpf.ClassIPv4Truncated},
	}

	// Frames cut short at every header boundary, and one byte inside each header.
	cuts := []struct {
		name  string
		frame []byte
		// class of a frame cut at n bytes
		classAt func(n int) bpf.Class
	}{
		{"ipv4 udp", udp4, func(n int) bpf.Class {
			switch {
			case n < 14:
				return bpf.ClassL2Truncated
			case n < 34:
				return bpf.ClassIPv4Truncated
			}
			return ipv4(17)
		}},
		{"ipv4 options", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 8, frames.TCP(0))), func(n int) bpf.Class {
			if n < 42 {
				return bpf.ClassIPv4Truncated
			}
			return ipv4(6)
		}},
		{"qinq ipv4", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(8)), ad, q), func(n int) bpf.Class {
			switch {
			case n < 22:
				return bpf.ClassL2Truncated
			case n < 42:
				return bpf.ClassIPv4Truncated
			}
			return ipv4(17)
		}},
		{"ipv6 hop-by-hop", v6hop, func(n int) bpf.Class {
			if n < 14+40+16 {
				return bpf.ClassIPv6Truncated
			}
			return ipv6(17)
		}},
		{"ipv6 fragment", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoFragment, frames.Frag(frames.ProtoUDP, 0, true, frames.UDP(8)))), func(n int) bpf.Class {
			if n < 14+40+8 {
				return bpf.ClassIPv6Truncated
			}
			return ipv6(17)
		}},
		{"ipv6 ah", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoAH, frames.Ext(frames.ProtoAH, frames.ProtoTCP, 24, frames.TCP(0)))), func(n int) bpf.Class {
			if n < 14+40+24 {
				return bpf.ClassIPv6Truncated
			}
			return ipv6(6)
		}},
	}
	for _, c := range cuts {
		// test_run needs at least an Ethernet header, so cuts start at 14.
		for _, n := range []int{14, 15, 17, 18, 21, 22, 33, 34, 41, 42, 53, 54, 55, 61, 62, 69, 70, 77, 78} {
			if n >= len(c.frame) {
				continue
			}
			full = append(full, frameCase{fmt.Sprintf("%s cut at %d", c.name, n), c.frame[:n], c.classAt(n)})
		}
	}
	return full
}

func isListed(c bpf.Class) bool {
	proto, ok := c.Protocol()
	if !ok {
		return false
	}
	for _, p := range listProtocols {
		if p == proto {
			return true
		}
	}
	return false
}

// TestClassify runs every hand-built frame through the program under the
// three policies and checks the verdict and that exactly its class counted
// one packet of its length.
func TestClassify(t *testing.T) {
	testns.RequirePrivileged(t)
	policies := []struct {
		name   string
		policy bpf.Policy
		want   func(bpf.Class) uint32
	}{
		{"drop all", bpf.Policy{DropAll: true}, func(bpf.Class) uint32 { return xdpDrop }},
		{"protocol list", bpf.Policy{Protocols: listProtocols}, func(c bpf.Class) uint32 {
			if isListed(c) {
				return xdpDrop
			}
			return xdpPass
		}},
		{"dry run", bpf.Policy{Protocols: listProtocols, DryRun: true}, func(bpf.Class) uint32 { return xdpPass }},
	}
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			p, err := bpf.Load(pol.policy)
			require.NoError(t, err)
			defer p.Close()

			var before, after bpf.Counters
			for _, fc := range frameCases() {
				require.NoError(t, p.ReadCounters(&before), fc.name)
				verdict, err := p.XDP().Run(&ebpf.RunOptions{Data: fc.frame})
				require.NoError(t, err, fc.name)
				require.NoError(t, p.ReadCounters(&after), fc.name)

				require.Equal(t, pol.want(fc.class), verdict, "%s: verdict", fc.name)
				for c := range after {
					want := before[c]
					if bpf.Class(c) == fc.class {
						want.Packets++
						want.Bytes += uint64(len(fc.frame))
					}
					require.Equal(t, want, after[c], "%s: counter of class %d (want class %d)", fc.name, c, fc.class)
				}
			}
		})
	}
}

func TestPolicyDrops(t *testing.T) {
	all := bpf.Policy{DropAll: true}
	list := bpf.Policy{Protocols: []uint8{17}}
	for c := 0; c < bpf.ClassCount; c++ {
		require.True(t, all.Drops(bpf.Class(c)))
	}
	require.True(t, list.Drops(bpf.IPv4Class(17)))
	require.True(t, list.Drops(bpf.IPv6Class(17)))
	require.False(t, list.Drops(bpf.IPv4Class(6)))
	require.False(t, list.Drops(bpf.ClassL2Other))
	require.False(t, list.Drops(bpf.ClassIPv4Truncated))
}

func TestClassNames(t *testing.T) {
	require.Equal(t, "ipv4", bpf.IPv4Class(255).Family().String())
	require.Equal(t, "ipv6", bpf.IPv6Class(0).Family().String())
	require.Equal(t, "ipv4", bpf.ClassIPv4Truncated.Family().String())
	require.Equal(t, "ipv6", bpf.ClassIPv6Truncated.Family().String())
	for _, c := range []bpf.Class{bpf.ClassL2ARP, bpf.ClassL2Other, bpf.ClassL2VLANOverflow, bpf.ClassL2Truncated} {
		require.Equal(t, "l2", c.Family().String())
		_, ok := c.Protocol()
		require.False(t, ok)
	}
	p, ok := bpf.IPv6Class(58).Protocol()
	require.True(t, ok)
	require.Equal(t, uint8(58), p)
}
