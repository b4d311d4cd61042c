//go:build linux

package bpf_test

import (
	"fmt"
	"testing"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// fuzzMaxFrame keeps frames within the linear buffer BPF_PROG_TEST_RUN gives
// an XDP program on 4 KiB pages (4096 - 256 headroom - skb_shared_info, which
// is up to 768 bytes with CONFIG_MAX_SKB_FRAGS=45); longer ones would be split
// into fragments the program does not see.
const fuzzMaxFrame = 3000

// fuzzProtocols is the protocol list policy: common protocols and the
// extension header numbers an IPv6 chain past its bound is classed by.
var fuzzProtocols = []uint8{0, frames.ProtoICMP, frames.ProtoUDP, frames.ProtoFragment, frames.ProtoGRE, frames.ProtoICMPv6, frames.ProtoDstOpts, 255}

// fuzzSeeds returns a frame of every class: the hand-written table, IPv4 with
// every protocol, IPv6 naming every protocol directly and from a later fragment.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, fc := range frameCases() {
		seeds = append(seeds, fc.frame)
	}
	for p := 0; p < 256; p++ {
		proto := uint8(p)
		seeds = append(seeds,
			frames.Ether(frames.EtherIPv4, frames.IPv4(proto, 0, frames.Pad(8))),
			frames.Ether(frames.EtherIPv6, frames.IPv6(proto, frames.Pad(8))),
			frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoFragment, frames.Frag(proto, 1, false, frames.Pad(8)))),
		)
	}
	return seeds
}

type fuzzProgram struct {
	name          string
	policy        bpf.Policy
	multiBuffer   bool
	prog          *bpf.Program
	before, after bpf.Counters
}

// fuzzPrograms loads the three policies every fuzz input runs under, in
// the single-buffer program, the multi-buffer one, or both.
func fuzzPrograms(f *testing.F, single, multi bool) []*fuzzProgram {
	policies := []struct {
		name   string
		policy bpf.Policy
	}{
		{"drop all", bpf.Policy{DropAll: true}},
		{"protocol list", bpf.Policy{Protocols: fuzzProtocols}},
		{"dry run", bpf.Policy{Protocols: fuzzProtocols, DryRun: true}},
	}
	var progs []*fuzzProgram
	for _, p := range policies {
		if single {
			progs = append(progs, &fuzzProgram{name: p.name, policy: p.policy})
		}
		if multi {
			progs = append(progs, &fuzzProgram{name: p.name + ", multi-buffer", policy: p.policy, multiBuffer: true})
		}
	}
	// Loaded once per fuzzing process, not per input.
	for _, fp := range progs {
		p, err := bpf.Load(fp.policy)
		if err != nil {
			f.Fatalf("load %s: %v", fp.name, err)
		}
		f.Cleanup(func() { p.Close() })
		if fp.multiBuffer {
			if err := p.UseMultiBuffer(); err != nil {
				f.Fatalf("load %s: %v", fp.name, err)
			}
		}
		fp.prog = p
	}
	return progs
}

// check runs frame through the program with its first linear bytes in the
// first buffer (0: as many as fit) and requires the reference's verdict and
// that exactly the reference's class counted one packet of the whole frame.
func (fp *fuzzProgram) check(t *testing.T, frame []byte, linear int, want refResult) {
	t.Helper()
	wantClass := want.class()
	if err := fp.prog.ReadCounters(&fp.before); err != nil {
		t.Fatal(err)
	}
	verdict, err := runSplit(fp.prog.XDP(), frame, linear)
	if err != nil {
		t.Fatalf("%s: %v", fp.name, err)
	}
	if err := fp.prog.ReadCounters(&fp.after); err != nil {
		t.Fatal(err)
	}
	var moved []int
	for c := range fp.after {
		if fp.after[c] != fp.before[c] {
			moved = append(moved, c)
		}
	}
	if len(moved) != 1 || bpf.Class(moved[0]) != wantClass {
		t.Fatalf("%s: frame %s (%d bytes in the first buffer): classes that counted %v, reference class %d (%+v)", fp.name, hexFrame(frame), linear, moved, wantClass, want)
	}
	d := bpf.Counter{
		Packets: fp.after[wantClass].Packets - fp.before[wantClass].Packets,
		Bytes:   fp.after[wantClass].Bytes - fp.before[wantClass].Bytes,
	}
	if d != (bpf.Counter{Packets: 1, Bytes: uint64(len(frame))}) {
		t.Fatalf("%s: frame %s: class %d counted %+v, want 1 packet of %d bytes", fp.name, hexFrame(frame), wantClass, d, len(frame))
	}
	if v := refVerdict(want, fp.policy); verdict != v {
		t.Fatalf("%s: frame %s of class %d: verdict %d, reference %d", fp.name, hexFrame(frame), wantClass, verdict, v)
	}
}

// FuzzClassify feeds each frame to the reference classifier and to the BPF
// program under three policies, single- and multi-buffer, and requires the
// same verdict and that exactly the reference's class counted one packet of
// the frame's length.
func FuzzClassify(f *testing.F) {
	testns.RequirePrivileged(f)
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	progs := fuzzPrograms(f, true, true)

	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < ethHeaderLen {
			t.Skip("BPF_PROG_TEST_RUN rejects frames shorter than an Ethernet header")
		}
		if len(frame) > fuzzMaxFrame {
			t.Skip("longer than the linear test_run buffer")
		}
		want := refClassify(frame)
		for _, fp := range progs {
			fp.check(t, frame, 0, want)
		}
		checkTags(t, want, want.class(), "reference class")
	})
}

// fuzzMaxJumbo bounds the frames FuzzClassifyMultiBuffer sends: above a
// 9000-byte MTU's frames, well within the fragments test_run can make.
const fuzzMaxJumbo = 16384

// multiBufferSeeds are frames of every class, with a 9014-byte frame of each
// kind, split at every header boundary of the frames the hand-written table
// cuts.
func multiBufferSeeds() []struct {
	frame  []byte
	linear uint16
} {
	var seeds []struct {
		frame  []byte
		linear uint16
	}
	add := func(frame []byte, linear int) {
		seeds = append(seeds, struct {
			frame  []byte
			linear uint16
		}{frame, uint16(linear)})
	}
	for _, s := range fuzzSeeds() {
		add(s, 0)
	}
	hop := frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoHopOpts,
		frames.Ext(frames.ProtoHopOpts, frames.ProtoUDP, 2048, frames.UDP(9014-14-40-2048-8))))
	for _, jumbo := range [][]byte{udpFrame(9014), tcpFrame(9014), tcp6Frame(9014), hop, udpFrame(4000), udpFrame(fuzzMaxJumbo)} {
		for _, n := range []int{0, 14, 15, 33, 34, 53, 54, 61, 62, 2101, 2102, 2109, 2110, testRunLinearMax} {
			add(jumbo, n)
		}
	}
	return seeds
}

// firstBuffer is how many bytes of a frame of n bytes the fuzz puts in the
// first buffer for the input linear: 0 leaves the split to test_run (as many
// as fit); otherwise at least an Ethernet header and at most what fits.
func firstBuffer(n int, linear uint16) int {
	if linear == 0 {
		return 0
	}
	most := min(n, testRunLinearMax)
	return ethHeaderLen + int(linear)%(most-ethHeaderLen+1)
}

// FuzzClassifyMultiBuffer feeds frames of up to 16 KiB, split into a first
// buffer of a length the fuzzer picks and fragments, to the multi-buffer
// program under the three policies, against the reference applied to the
// first buffer (where the program reads headers) with the whole frame's
// length counted.
func FuzzClassifyMultiBuffer(f *testing.F) {
	testns.RequirePrivileged(f)
	for _, s := range multiBufferSeeds() {
		f.Add(s.frame, s.linear)
	}
	progs := fuzzPrograms(f, false, true)

	f.Fuzz(func(t *testing.T, frame []byte, linear uint16) {
		if len(frame) < ethHeaderLen {
			t.Skip("BPF_PROG_TEST_RUN rejects frames shorter than an Ethernet header")
		}
		if len(frame) > fuzzMaxJumbo {
			t.Skip("longer than the frames of a 9000-byte MTU")
		}
		first := firstBuffer(len(frame), linear)
		seen := first
		if seen == 0 {
			seen = min(len(frame), testRunLinearMax)
		}
		want := refClassifyBuffers(frame, seen)
		for _, fp := range progs {
			fp.check(t, frame, first, want)
		}
		checkTags(t, want, want.class(), "reference class")
	})
}

// hexFrame shows a frame in hex, a long one by its first 256 bytes.
func hexFrame(frame []byte) string {
	if len(frame) <= 256 {
		return fmt.Sprintf("%x", frame)
	}
	return fmt.Sprintf("%x… (%d bytes)", frame[:256], len(frame))
}
