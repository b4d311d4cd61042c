//go:build linux

package main

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFrames: only the first frame is what the run's rule matches (UDP
// from port 123, an IP packet of at least 400 bytes); each other one
// differs from it in one of those, and all go to the address given.
func TestFrames(t *testing.T) {
	dst := netip.MustParseAddr("10.9.8.7")
	match, others := Frames(dst)
	type facts struct {
		proto byte
		sport uint16
		iplen uint16
		frame int
		dst   netip.Addr
	}
	read := func(f []byte) facts {
		ip := f[14:]
		d, _ := netip.AddrFromSlice(ip[16:20])
		return facts{ip[9], binary.BigEndian.Uint16(ip[20:]), binary.BigEndian.Uint16(ip[2:]), len(f), d}
	}
	require.Equal(t, facts{17, 123, 454, 468, dst}, read(match))
	require.Equal(t, []facts{{17, 123, 76, 90, dst}, {17, 53, 454, 468, dst}, {6, 123, 454, 468, dst}},
		[]facts{read(others[0]), read(others[1]), read(others[2])})
}
