//go:build linux

package bpf_test

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// This file holds a reference classifier written from the design (the
// plugin README's metric schema and "What is counted where" in
// docs/metrics.md: truncated frames, families, VLANs, IPv6 extension
// headers, fragments), not from xdp_drop.c:
// FuzzClassify holds the BPF program to it.

// refResult is what the design says a frame is counted as: the family it got
// to and either its IP protocol or the name of a class without one.
type refResult struct {
	family bpf.Family
	proto  int    // IP protocol 0..255, or -1 for a class without one
	name   string // protocol tag of a class without an IP protocol
}

const (
	ethHeaderLen   = 14
	vlanTagLen     = 4
	vlanMaxTags    = 2 // more tags than this are l2 vlan_overflow
	ipv4MinHeader  = 20
	ipv6HeaderLen  = 40
	ipv6ExtMax     = 8 // extension headers skipped before parsing stops
	ipv6ExtMinSize = 8
)

func l2(name string) refResult { return refResult{family: bpf.FamilyL2, proto: -1, name: name} }

func truncated(f bpf.Family) refResult { return refResult{family: f, proto: -1, name: "truncated"} }

func ip(f bpf.Family, proto uint8) refResult { return refResult{family: f, proto: int(proto)} }

// refClassify classifies a frame as the design describes it.
func refClassify(frame []byte) refResult {
	if len(frame) < ethHeaderLen {
		return l2("truncated")
	}
	ethertype := binary.BigEndian.Uint16(frame[12:])
	off := ethHeaderLen
	for tags := 0; ethertype == 0x8100 || ethertype == 0x88A8; tags++ {
		if tags == vlanMaxTags {
			return l2("vlan_overflow")
		}
		if len(frame) < off+vlanTagLen {
			return l2("truncated")
		}
		ethertype = binary.BigEndian.Uint16(frame[off+2:])
		off += vlanTagLen
	}
	switch ethertype {
	case 0x0800:
		return refIPv4(frame[off:])
	case 0x86DD:
		return refIPv6(frame[off:])
	case 0x0806:
		return l2("arp")
	}
	return l2("other")
}

// refClassifyBuffers classifies a frame that arrives in several buffers, the
// first holding its first first bytes: the program reads headers from the
// first buffer only, so a frame whose headers end past it is truncated as if
// the frame ended there (its bytes still count the whole frame).
func refClassifyBuffers(frame []byte, first int) refResult {
	return refClassify(frame[:first])
}

// refIPv4: the protocol byte names the class once the whole header, at least
// 20 bytes and ihl*4, is in the frame.
func refIPv4(pkt []byte) refResult {
	if len(pkt) < ipv4MinHeader {
		return truncated(bpf.FamilyIPv4)
	}
	hlen := int(pkt[0]&0x0f) * 4
	if hlen < ipv4MinHeader || len(pkt) < hlen {
		return truncated(bpf.FamilyIPv4)
	}
	return ip(bpf.FamilyIPv4, pkt[9])
}

// refIPv6 skips up to ipv6ExtMax extension headers, each of which must lie
// wholly in the frame, and classes the frame by the next header where it stops.
func refIPv6(pkt []byte) refResult {
	if len(pkt) < ipv6HeaderLen {
		return truncated(bpf.FamilyIPv6)
	}
	next := pkt[6]
	rest := pkt[ipv6HeaderLen:]
	for skipped := 0; skipped < ipv6ExtMax && isIPv6Ext(next); skipped++ {
		if len(rest) < ipv6ExtMinSize {
			return truncated(bpf.FamilyIPv6)
		}
		size := ipv6ExtSize(next, rest)
		if len(rest) < size {
			return truncated(bpf.FamilyIPv6)
		}
		if next == 44 && binary.BigEndian.Uint16(rest[2:])>>3 != 0 {
			// A later fragment: what follows is payload, named by this header.
			return ip(bpf.FamilyIPv6, rest[0])
		}
		next = rest[0]
		rest = rest[size:]
	}
	return ip(bpf.FamilyIPv6, next)
}

func isIPv6Ext(next uint8) bool {
	switch next {
	case 0, 43, 44, 51, 60: // hop-by-hop, routing, fragment, AH, destination options
		return true
	}
	return false
}

// ipv6ExtSize is the length of the extension header at the start of h.
func ipv6ExtSize(kind uint8, h []byte) int {
	switch kind {
	case 44:
		return 8
	case 51: // RFC 4302: length in 4-byte units, minus 2
		return (int(h[1]) + 2) * 4
	}
	return (int(h[1]) + 1) * 8 // RFC 8200: length in 8-byte units, not counting the first 8
}

// refVerdict is the XDP action the design gives a frame of result r under p.
func refVerdict(r refResult, p bpf.Policy) uint32 {
	switch {
	case p.DryRun:
		return xdpPass
	case p.DropAll:
		return xdpDrop
	case r.proto >= 0 && slices.Contains(p.Protocols, uint8(r.proto)):
		return xdpDrop
	}
	return xdpPass
}

// class is the counter class the reference result is counted under.
func (r refResult) class() bpf.Class {
	if r.proto >= 0 {
		if r.family == bpf.FamilyIPv4 {
			return bpf.IPv4Class(uint8(r.proto))
		}
		return bpf.IPv6Class(uint8(r.proto))
	}
	switch {
	case r.family == bpf.FamilyIPv4:
		return bpf.ClassIPv4Truncated
	case r.family == bpf.FamilyIPv6:
		return bpf.ClassIPv6Truncated
	case r.name == "arp":
		return bpf.ClassL2ARP
	case r.name == "vlan_overflow":
		return bpf.ClassL2VLANOverflow
	case r.name == "other":
		return bpf.ClassL2Other
	}
	return bpf.ClassL2Truncated
}

// checkTags requires class c to carry the family and protocol tags of r, as
// the metric schema names them.
func checkTags(t testing.TB, r refResult, c bpf.Class, msg string) {
	t.Helper()
	require.Equal(t, r.family, c.Family(), "%s: family of class %d", msg, c)
	proto, ok := c.Protocol()
	require.Equal(t, r.proto >= 0, ok, "%s: class %d has an IP protocol", msg, c)
	if ok {
		require.Equal(t, r.proto, int(proto), "%s: protocol of class %d", msg, c)
		return
	}
	require.Equal(t, r.name, c.Name(), "%s: protocol tag of class %d", msg, c)
}

// TestReferenceMatchesTable holds the reference to the hand-written table the
// BPF program is tested with, so a reference bug shows without root.
func TestReferenceMatchesTable(t *testing.T) {
	for _, fc := range frameCases() {
		r := refClassify(fc.frame)
		require.Equal(t, fc.class, r.class(), fc.name)
		checkTags(t, r, fc.class, fc.name)
	}
}

func TestReferenceShortFrames(t *testing.T) {
	for n := 0; n < ethHeaderLen; n++ {
		require.Equal(t, bpf.ClassL2Truncated, refClassify(make([]byte, n)).class(), "%d bytes", n)
	}
}

// TestReferenceVerdicts checks the policy side of the reference against the
// design: drop all drops everything, a list only listed IP protocols, a dry
// run nothing.
func TestReferenceVerdicts(t *testing.T) {
	list := bpf.Policy{Protocols: []uint8{17, 60}}
	cases := []struct {
		r                  refResult
		all, listed, dryRn uint32
	}{
		{ip(bpf.FamilyIPv4, 17), xdpDrop, xdpDrop, xdpPass},
		{ip(bpf.FamilyIPv6, 17), xdpDrop, xdpDrop, xdpPass},
		{ip(bpf.FamilyIPv6, 60), xdpDrop, xdpDrop, xdpPass},
		{ip(bpf.FamilyIPv4, 6), xdpDrop, xdpPass, xdpPass},
		{truncated(bpf.FamilyIPv4), xdpDrop, xdpPass, xdpPass},
		{truncated(bpf.FamilyIPv6), xdpDrop, xdpPass, xdpPass},
		{l2("arp"), xdpDrop, xdpPass, xdpPass},
		{l2("truncated"), xdpDrop, xdpPass, xdpPass},
	}
	for _, c := range cases {
		require.Equal(t, c.all, refVerdict(c.r, bpf.Policy{DropAll: true}), "%+v drop all", c.r)
		require.Equal(t, c.listed, refVerdict(c.r, list), "%+v list", c.r)
		require.Equal(t, c.dryRn, refVerdict(c.r, bpf.Policy{DropAll: true, DryRun: true}), "%+v dry run", c.r)
		require.Equal(t, c.dryRn, refVerdict(c.r, bpf.Policy{Protocols: list.Protocols, DryRun: true}), "%+v dry run list", c.r)
	}
}

// TestFuzzSeedsCoverEveryClass makes sure the fuzz seed corpus starts from a
// frame of every class the program counts.
func TestFuzzSeedsCoverEveryClass(t *testing.T) {
	seen := make(map[bpf.Class]bool)
	for _, s := range fuzzSeeds() {
		seen[refClassify(s).class()] = true
	}
	for c := 0; c < bpf.ClassCount; c++ {
		require.True(t, seen[bpf.Class(c)], "no seed of class %d", c)
	}
}
