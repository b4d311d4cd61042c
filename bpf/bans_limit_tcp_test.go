//go:build linux

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// tcpFamily is where tcpRig's connection runs: the host's listener on its
// test veth, and a client behind a second namespace, routed through it.
type tcpFamily struct {
	name           string
	host, client   string // addresses
	hostNet        string // the host's network on its test veth
	hostLen        int
	router, clNet  string // the host's address towards the client, the client's network
	prefixLen      int
	net            string // "tcp4" or "tcp6"
	udpClass, tcpC bpf.Class
}

var tcpFamilies = []tcpFamily{
	{name: "IPv4", host: "10.9.0.1", client: "10.9.1.77", hostNet: "10.9.0.0", hostLen: 24,
		router: "10.9.1.1", clNet: "10.9.1.0", prefixLen: 24, net: "tcp4",
		udpClass: bpf.IPv4Class(frames.ProtoUDP), tcpC: bpf.IPv4Class(frames.ProtoTCP)},
	{name: "IPv6", host: "fd00:9::1", client: "fd00:9:1::77", hostNet: "fd00:9::", hostLen: 64,
		router: "fd00:9:1::1", clNet: "fd00:9:1::", prefixLen: 64, net: "tcp6",
		udpClass: bpf.IPv6Class(frames.ProtoUDP), tcpC: bpf.IPv6Class(frames.ProtoTCP)},
}

const tcpPort = 8080

func (f tcpFamily) hostCIDR() string   { return fmt.Sprintf("%s/%d", f.host, f.hostLen) }
func (f tcpFamily) routerCIDR() string { return fmt.Sprintf("%s/%d", f.router, f.prefixLen) }
func (f tcpFamily) clientCIDR() string { return fmt.Sprintf("%s/%d", f.client, f.prefixLen) }

// tcpRig is a program with bans attached to the test veth of a namespace
// holding an established TCP connection from the family's client, and a
// generator that sends frames through the veth's peer.
type tcpRig struct {
	*limitRig
	f     tcpFamily
	ns    *testns.NS
	gen   *txgen.Generator
	cport uint16 // the connection's client port
	sent  uint64
}

func attachTCPBans(t *testing.T, f tcpFamily, policy bpf.Policy) *tcpRig {
	ns := testns.New(t)
	cport := establishFrom(t, ns, f)
	r := &tcpRig{limitRig: loadLimitBans(t, policy), f: f, ns: ns, cport: cport}
	require.NoError(t, ns.Attach(testns.Dev, func() error { return r.p.Attach(ns.DevIdx, bpf.ModeNative) }))
	gen, err := txgen.New()
	require.NoError(t, err)
	t.Cleanup(func() { gen.Close() })
	r.gen = gen
	return r
}

// enableIPv6 turns IPv6 on for the devices named, in the calling thread's
// namespace (testns turns it off): the test veth's peer keeps it off, so
// that the kernel sends nothing of its own into the program.
func enableIPv6(devs ...string) error {
	for _, d := range devs {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+d+"/disable_ipv6", []byte("0"), 0); err != nil {
			return err
		}
	}
	return nil
}

// establishFrom connects the family's client, in a namespace of its own
// reached over a second veth pair, to a listener on its host address and
// tcpPort in ns, and returns the client's port.
func establishFrom(t *testing.T, ns *testns.NS, f tcpFamily) uint16 {
	t.Helper()
	client := testns.New(t)
	_, _, err := ns.AddVeth("xdpc0", "xdpc1")
	require.NoError(t, err)
	fd, err := unix.Open(client.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	v6 := f.net == "tcp6"
	up := func(h *netlink.Handle, name, cidr string) error {
		if v6 {
			if err := enableIPv6(name); err != nil {
				return err
			}
		}
		link, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(cidr)
		a.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(link, a); err != nil {
			return err
		}
		return h.LinkSetUp(link)
	}
	require.NoError(t, ns.Do(func() error {
		link, err := ns.Netlink().LinkByName("xdpc1")
		if err != nil {
			return err
		}
		if err := ns.Netlink().LinkSetNsFd(link, fd); err != nil {
			return err
		}
		if err := up(ns.Netlink(), testns.Dev, f.hostCIDR()); err != nil {
			return err
		}
		return up(ns.Netlink(), "xdpc0", f.routerCIDR())
	}))
	hostPort := net.JoinHostPort(f.host, fmt.Sprint(tcpPort))
	var conn net.Conn
	var ln net.Listener
	require.NoError(t, ns.Do(func() error {
		ln, err = net.Listen(f.net, hostPort)
		return err
	}))
	require.NoError(t, client.Do(func() error {
		if err := up(client.Netlink(), "xdpc1", f.clientCIDR()); err != nil {
			return err
		}
		link, err := client.Netlink().LinkByName("xdpc1")
		if err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR(fmt.Sprintf("%s/%d", f.hostNet, f.hostLen))
		if err := client.Netlink().RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Gw: net.ParseIP(f.router)}); err != nil {
			return err
		}
		conn, err = net.DialTimeout(f.net, hostPort, 5*time.Second)
		return err
	}))
	server, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(); server.Close(); ln.Close() })
	return uint16(conn.LocalAddr().(*net.TCPAddr).Port)
}

// connFrame is an ACK from the client's port sport to the host's dport,
// out of the connection's window.
func (r *tcpRig) connFrame(sport, dport uint16) []byte {
	l4 := frames.Ports(frames.TCP(8), sport, dport)
	binary.BigEndian.PutUint32(l4[4:], 0x12345678)
	l4[13] = 0x10 // ACK
	return r.addressed(frames.ProtoTCP, l4)
}

// udpFrame is a UDP frame from the client to the host.
func (r *tcpRig) udpFrame() []byte {
	return r.addressed(frames.ProtoUDP, frames.Ports(frames.UDP(8), 40000, 4000))
}

func (r *tcpRig) addressed(proto uint8, l4 []byte) []byte {
	src, dst := netip.MustParseAddr(r.f.client), netip.MustParseAddr(r.f.host)
	if src.Is4() {
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(proto, 0, l4), src, dst))
	}
	return frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(proto, l4), src, dst))
}

// flood sends n copies of frame through the veth's peer and waits until
// the program has counted every frame sent so far.
func (r *tcpRig) flood(frame []byte, n int) {
	r.t.Helper()
	require.NoError(r.t, r.ns.Do(func() error { return r.gen.Send(r.ns.PeerIdx, frame, n) }))
	r.sent += uint64(n)
	var total uint64
	for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var b bpf.Block
		require.NoError(r.t, r.p.ReadBlock(&b))
		total = 0
		for _, c := range b.Class {
			total += c[bpf.ActionPass].Packets + c[bpf.ActionDrop].Packets
		}
		if total >= r.sent {
			break
		}
	}
	require.Equal(r.t, r.sent, total, "frames counted")
}

// classCounts is the frames of class class passed and dropped.
func (r *tcpRig) classCounts(class bpf.Class) [2]uint64 {
	r.t.Helper()
	var b bpf.Block
	require.NoError(r.t, r.p.ReadBlock(&b))
	return [2]uint64{b.Class[class][bpf.ActionPass].Packets, b.Class[class][bpf.ActionDrop].Packets}
}

// TestBanLimitEstablishedTCP: while a forged UDP flood from a limited
// source spends its limit (100 a second, burst 10; the clock stands), the
// frames of the host's established TCP connection from that source all
// pass, uncounted by the bans, and take nothing of the limit when over it;
// its TCP frames to or from a port without a socket stay capped; a drop
// claim on the source, or on a wider prefix, drops the connection's frames
// too. IPv4 and IPv6, without rules and with a rule none of the frames
// match; real frames through a veth.
func TestBanLimitEstablishedTCP(t *testing.T) {
	dns := bpf.Rule{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53))}
	for _, f := range tcpFamilies {
		for _, policy := range []bpf.Policy{{}, {Rules: []bpf.Rule{dns}}} {
			t.Run(fmt.Sprintf("%s/rules=%d", f.name, len(policy.Rules)), func(t *testing.T) {
				testEstablishedTCP(t, f, policy)
			})
		}
	}
}

func testEstablishedTCP(t *testing.T, f tcpFamily, policy bpf.Policy) {
	r := attachTCPBans(t, f, policy)
	source := netip.PrefixFrom(netip.MustParseAddr(f.client), netip.MustParseAddr(f.client).BitLen()).String()
	require.Equal(t, bpf.BanAdded, r.limit(source, time.Hour, bpf.BanOriginDetect, 100))
	r.flood(r.udpFrame(), 200)
	require.Equal(t, [2]uint64{10, 190}, r.classCounts(f.udpClass), "the UDP flood gets the burst")

	r.flood(r.connFrame(r.cport, tcpPort), 50)
	require.Equal(t, [2]uint64{50, 0}, r.classCounts(f.tcpC), "the connection's frames pass the spent limit")
	r.flood(r.connFrame(r.cport, tcpPort+1), 30)
	require.Equal(t, [2]uint64{50, 30}, r.classCounts(f.tcpC), "no socket on that port: capped")
	r.flood(r.connFrame(r.cport+1, tcpPort), 20)
	require.Equal(t, [2]uint64{50, 50}, r.classCounts(f.tcpC), "no socket from that port: capped")
	r.flood(r.udpFrame(), 20)
	require.Equal(t, [2]uint64{10, 210}, r.classCounts(f.udpClass), "the connection took nothing of the limit")
	require.Equal(t, [2]uint64{0, 190 + 50 + 20}, r.dropped())

	r.at(time.Second)
	r.flood(r.connFrame(r.cport, tcpPort), 15)
	require.Equal(t, [2]uint64{65, 50}, r.classCounts(f.tcpC), "within the limit as over it")
	r.flood(r.udpFrame(), 20)
	require.Equal(t, [2]uint64{10, 230}, r.classCounts(f.udpClass), "the connection's frames within it took the burst")

	require.Equal(t, bpf.BanAdded, r.ban(source, time.Hour, bpf.BanOriginCrowdSec))
	r.flood(r.connFrame(r.cport, tcpPort), 40)
	require.Equal(t, [2]uint64{65, 90}, r.classCounts(f.tcpC), "a drop claim drops the connection too")
	require.Equal(t, [2]uint64{40, 190 + 50 + 20 + 20}, r.dropped())

	require.True(t, r.lift(source, bpf.BanOriginCrowdSec))
	wider := netip.PrefixFrom(netip.MustParseAddr(f.client), f.prefixLen).Masked().String()
	require.Equal(t, bpf.BanAdded, r.ban(wider, time.Hour, bpf.BanOriginCrowdSec))
	r.flood(r.connFrame(r.cport, tcpPort), 25)
	require.Equal(t, [2]uint64{65, 115}, r.classCounts(f.tcpC), "exempt from the limit, not from a wider drop claim")
	require.Equal(t, [2]uint64{65, 190 + 50 + 20 + 20}, r.dropped())
}
