package detect

import (
	"math/rand/v2"
	"net/netip"
)

// BenchFrames is the mix the detector's cost is measured on (BenchmarkAdd,
// make bench): 65,536 frames of 64 bytes, a quarter from one heavy TCP
// source on one flow, the rest UDP from random addresses of 65,536 /24s.
func BenchFrames() []Frame {
	rnd := rand.New(rand.NewPCG(5, 6))
	dst := netip.AddrFrom4([4]byte{192, 0, 2, 10})
	frames := make([]Frame, 1<<16)
	for i := range frames {
		if i%4 == 0 {
			frames[i] = Frame{Src: netip.AddrFrom4([4]byte{10, 0, 1, 53}), Dst: dst, SPort: 40001, DPort: 443, Length: 64, Proto: protoTCP}
			continue
		}
		n := rnd.IntN(1 << 16)
		frames[i] = Frame{Src: netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), byte(rnd.IntN(256))}), Dst: dst, SPort: 53, DPort: 53, Length: 64, Proto: 17}
	}
	return frames
}
