//go:build linux

// Command sendflow sends the frames of the end-to-end run's FlowSpec rule
// (destination -dst/32 protocol udp source-port ==123 packet-length >=400
// then discard): -count NTP frames of 468 bytes from port 123, which the
// rule matches, and as many of each kind it must not match (NTP frames of
// 90 bytes, DNS replies, TCP), out of one end of a veth pair. It prints, as
// JSON, what the rule's xdp_drop_flowspec point must count: its packets and
// bytes. Like sendmix it must run inside the run's own network namespace
// (ip netns exec NS sendflow -netns NS -iface PEER -dst 10.0.0.1 -count
// 100); it refuses any other.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
	"github.com/xdp-drop/xdp_drop/test/e2e/internal/e2ens"
)

// Source sends every frame.
const Source = "198.51.100.123"

// Report is what the rule must count, and what was sent besides.
type Report struct {
	Packets uint64 `json:"packets"` // matched: the large NTP frames
	Bytes   uint64 `json:"bytes"`
	Others  uint64 `json:"others"` // sent, not matched
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sendflow:", err)
		os.Exit(1)
	}
}

func run() error {
	netns := flag.String("netns", "", "name of the network namespace this runs in (required, as ip netns names it)")
	iface := flag.String("iface", "", "veth end to send from (required); its peer receives")
	dst := flag.String("dst", "", "the host's address the rule names (required, IPv4)")
	count := flag.Int("count", 0, "frames of each kind to send (required)")
	flag.Parse()
	if *netns == "" || *iface == "" || *dst == "" || *count <= 0 {
		flag.Usage()
		return errors.New("-netns, -iface, -dst and -count are required")
	}
	to, err := netip.ParseAddr(*dst)
	if err != nil || !to.Is4() {
		return fmt.Errorf("-dst %q: not an IPv4 address", *dst)
	}
	ifindex, err := e2ens.CheckVeth(*netns, *iface)
	if err != nil {
		return err
	}
	gen, err := txgen.New()
	if err != nil {
		return err
	}
	defer gen.Close()
	match, others := Frames(to)
	if err := gen.Send(ifindex, match, *count); err != nil {
		return err
	}
	for _, f := range others {
		if err := gen.Send(ifindex, f, *count); err != nil {
			return err
		}
	}
	n := uint64(*count)
	return json.NewEncoder(os.Stdout).Encode(Report{Packets: n, Bytes: n * uint64(len(match)), Others: n * uint64(len(others))})
}

// Frames are the frame the rule matches (an NTP frame of 468 bytes) and
// those it must not: an NTP frame of 90 bytes, a DNS reply and a TCP
// segment from port 123, all to dst.
func Frames(dst netip.Addr) (match []byte, others [][]byte) {
	src := netip.MustParseAddr(Source)
	udp := func(sport uint16, payload int) []byte {
		return frames.Ether(frames.EtherIPv4, frames.Addressed(
			frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(payload), sport, 40123)), src, dst))
	}
	tcp := frames.Ether(frames.EtherIPv4, frames.Addressed(
		frames.IPv4(frames.ProtoTCP, 0, frames.Ports(frames.TCP(414), 123, 40123)), src, dst))
	return udp(123, 426), [][]byte{udp(123, 48), udp(53, 426), tcp}
}
