//go:build linux

package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// banCase is one frame's source in the bans rows and the bans its bucket
// holds; the bucket holds no other ban.
type banCase struct {
	name    string
	src     netip.Addr
	banned  bool
	entries []netip.Prefix
	// collide: bans elsewhere set the filter bit of every length the
	// source probes, so that each is a hash lookup that misses.
	collide bool
}

// fullAround is a ban of every length from..to in src's bucket, none
// holding src: src masked to each length with that length's last bit
// flipped. A length equal to the bucket width (IPv6 /48) is a /48 folded
// into the same bucket (bits 31 and 47 flipped).
func fullAround(src netip.Addr, from, to int) []netip.Prefix {
	var ps []netip.Prefix
	for n := from; n <= to; n++ {
		b := src.AsSlice()
		flip := []int{n - 1}
		if src.Is6() && n == banWidth6 {
			flip = []int{31, 47}
		}
		for _, i := range flip {
			b[i/8] ^= 0x80 >> (i % 8)
		}
		a, _ := netip.AddrFromSlice(b)
		ps = append(ps, netip.PrefixFrom(a, n).Masked())
	}
	return ps
}

func banCases() []banCase {
	a := netip.MustParseAddr
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	return []banCase{
		{name: "IPv4, not banned, empty bucket", src: a("192.0.2.1")},
		{name: "IPv4, not banned, bucket full (/17–/32)", src: a("203.0.113.1"), entries: fullAround(a("203.0.113.1"), 17, 32)},
		{name: "IPv4, not banned, bucket full, filter hit on every length", src: a("203.1.113.1"), entries: fullAround(a("203.1.113.1"), 17, 32), collide: true},
		{name: "IPv4, banned /32", src: a("198.51.7.7"), banned: true, entries: []netip.Prefix{p("198.51.7.7/32")}},
		{name: "IPv4, inside a banned /24", src: a("198.52.9.1"), banned: true, entries: []netip.Prefix{p("198.52.9.0/24")}},
		{name: "IPv4, inside a banned /24, bucket full", src: a("203.2.113.1"), banned: true,
			entries: append(fullAround(a("203.2.113.1"), 17, 32), p("203.2.113.0/24"))},
		{name: "IPv6, not banned, empty bucket", src: a("2001:db8:e::1")},
		{name: "IPv6, not banned, bucket full (/48–/128)", src: a("2001:db8:f::1"), entries: fullAround(a("2001:db8:f::1"), 48, 128)},
		{name: "IPv6, not banned, bucket full, filter hit on every length", src: a("2001:db8:10::1"), entries: fullAround(a("2001:db8:10::1"), 48, 128), collide: true},
		{name: "IPv6, banned /128", src: a("2001:db8:7::7"), banned: true, entries: []netip.Prefix{p("2001:db8:7::7/128")}},
		{name: "IPv6, inside a banned /64", src: a("2001:db8:8:5::1"), banned: true, entries: []netip.Prefix{p("2001:db8:8:5::/64")}},
		{name: "IPv6, inside a banned /48", src: a("2001:db8:9::1"), banned: true, entries: []netip.Prefix{p("2001:db8:9::/48")}},
		{name: "IPv6, inside a banned /48, bucket full", src: a("2001:db8:11::1"), banned: true,
			entries: append(fullAround(a("2001:db8:11::1"), 49, 128), p("2001:db8:11::/48"))},
	}
}

// probed is the lengths c's source probes, longest first, up to the one
// that holds it.
func (c banCase) probed() []netip.Prefix {
	var lens []int
	for _, e := range c.entries {
		lens = append(lens, e.Bits())
	}
	slices.Sort(lens)
	lens = slices.Compact(lens)
	slices.Reverse(lens)
	var ps []netip.Prefix
	for _, n := range lens {
		k := netip.PrefixFrom(c.src, n).Masked()
		ps = append(ps, k)
		if slices.Contains(c.entries, k) {
			break
		}
	}
	return ps
}

// Bucket widths and filter hash, as bpf/xdp_drop.c's ban_lookup_inline and
// ban_maybe fold and hash (bpf/banindex.go keeps them unexported).
const (
	banWidth4, banWidth6 = 16, 48
	banFilterBits        = 23
	banKeyV6             = 0x100
	banHashK0            = 0x9E3779B97F4A7C15
	banHashK1            = 0xC2B2AE3D27D4EB4F
	banHashK2            = 0x165667B19E3779F9
	banHashK3            = 0xD6E8FEB86659FD93
	banHashK4            = 0xFF51AFD7ED558CCD
)

// banBucket is p's bucket, the family in bit 16.
func banBucket(p netip.Prefix) uint32 {
	a := p.Addr().AsSlice()
	if p.Addr().Is4() {
		return uint32(binary.BigEndian.Uint16(a))
	}
	h := binary.BigEndian.Uint32(a)
	return 1<<16 | (h^h>>16^uint32(binary.BigEndian.Uint16(a[4:])))&0xFFFF
}

// banFilterBit is the bit of entry p (masked) in the filter.
func banFilterBit(p netip.Prefix) uint32 {
	a := p.Addr().AsSlice()
	var x uint64
	if p.Addr().Is4() {
		x = (uint64(p.Bits())<<32 | uint64(binary.NativeEndian.Uint32(a))) * banHashK0
	} else {
		w := func(i int) uint64 { return uint64(binary.NativeEndian.Uint32(a[4*i:])) }
		x = uint64(p.Bits()|banKeyV6)*banHashK0 + w(0)*banHashK1 + w(1)*banHashK2 + w(2)*banHashK3 + w(3)*banHashK4
		x ^= x >> 32
		x *= banHashK0
	}
	return uint32(x >> (64 - banFilterBits))
}

// banFixed is what every ban table of the rows holds but the random fill:
// the cases' bans, and the /32s found whose filter bit is that of each
// length a colliding case probes (in buckets of no case).
type banFixed struct {
	cases    []banCase
	reserved map[uint32]bool // the cases' buckets
	entries  []netip.Prefix
}

func newBanFixed() (banFixed, error) {
	f := banFixed{cases: banCases(), reserved: map[uint32]bool{}}
	owner := map[uint32]string{}
	for _, c := range f.cases {
		b := banBucket(netip.PrefixFrom(c.src, c.src.BitLen()))
		if o, ok := owner[b]; ok {
			return f, fmt.Errorf("bans cases %q and %q share a bucket", o, c.name)
		}
		owner[b], f.reserved[b] = c.name, true
		for _, e := range c.entries {
			if banBucket(e) != b || e.Contains(c.src) != (c.banned && e == c.probed()[len(c.probed())-1]) {
				return f, fmt.Errorf("bans case %q: %s is not as the case says", c.name, e)
			}
		}
		f.entries = append(f.entries, c.entries...)
	}
	want := map[uint32]bool{}
	for _, c := range f.cases {
		if !c.collide {
			continue
		}
		for _, k := range c.probed() {
			want[banFilterBit(k)] = true
		}
	}
	// A counter scrambled into addresses: each bit needed is met after
	// about 2^23 tries.
	for i := uint64(1); len(want) > 0; i++ {
		if i > 1<<31 {
			return f, fmt.Errorf("bans: %d filter bits never met", len(want))
		}
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], uint32(i*banHashK1>>32))
		p := netip.PrefixFrom(netip.AddrFrom4(a), 32)
		if !want[banFilterBit(p)] || f.reserved[banBucket(p)] {
			continue
		}
		delete(want, banFilterBit(p))
		f.entries = append(f.entries, p)
	}
	return f, nil
}
