package xdp_drop

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// TestDetectFrame: the detection reads a sample's addresses and the ports
// of its TCP or UDP header when the sample holds them; a later fragment,
// a cut header or an IPv6 extension header gives the source alone.
func TestDetectFrame(t *testing.T) {
	src4, dst4 := netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("192.0.2.10")
	src6, dst6 := netip.MustParseAddr("2001:db8::9"), netip.MustParseAddr("2001:db8::10")
	tcp4 := frames.Addressed(frames.IPv4(frames.ProtoTCP, 8, frames.Ports(frames.TCP(0), 40001, 443)), src4, dst4)
	udp6 := frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.Ports(frames.UDP(4), 53, 5353)), src6, dst6)
	frag4 := frames.Addressed(frames.IPv4(frames.ProtoTCP, 0, frames.Ports(frames.TCP(0), 40001, 443)), src4, dst4)
	binary.BigEndian.PutUint16(frag4[6:], 185) // a later fragment: its bytes are not a header
	ext6 := frames.Addressed(frames.IPv6(frames.ProtoHopOpts, frames.Ext(frames.ProtoHopOpts, frames.ProtoTCP, 8, frames.Ports(frames.TCP(0), 1, 2))), src6, dst6)
	for _, c := range []struct {
		name  string
		frame []byte
		want  detect.Frame
	}{
		{"ipv4 tcp with options", frames.Ether(frames.EtherIPv4, tcp4), detect.Frame{Src: src4, Dst: dst4, SPort: 40001, DPort: 443}},
		{"ipv6 udp under two tags", frames.Ether(frames.EtherIPv6, udp6, frames.Tag{TPID: frames.Ether8021AD, VID: 5}, frames.Tag{TPID: frames.Ether8021Q, VID: 6}), detect.Frame{Src: src6, Dst: dst6, SPort: 53, DPort: 5353}},
		{"ipv4 later fragment", frames.Ether(frames.EtherIPv4, frag4), detect.Frame{Src: src4}},
		{"ipv6 extension header", frames.Ether(frames.EtherIPv6, ext6), detect.Frame{Src: src6}},
		{"ipv4 cut at the ports", frames.Ether(frames.EtherIPv4, tcp4)[:14+28+2], detect.Frame{Src: src4}},
		{"ipv4 cut at the destination", frames.Ether(frames.EtherIPv4, tcp4)[:14+18], detect.Frame{Src: src4}},
	} {
		got, ok := detectFrame(c.frame)
		require.True(t, ok, c.name)
		require.Equal(t, c.want, got, c.name)
	}
	_, ok := detectFrame(frames.Ether(frames.EtherARP, frames.ARPRequest()))
	require.False(t, ok)
	_, ok = detectFrame(frames.Ether(frames.EtherIPv4, tcp4)[:14+12])
	require.False(t, ok, "no whole source")
}
