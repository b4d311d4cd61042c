//go:build linux

package bpf_test

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/frames"
	"github.com/xdp-drop/xdp_drop/internal/testns"
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
	prog          *bpf.Program
	before, after bpf.Counters
}

// FuzzClassify feeds each frame to the reference classifier and to the BPF
// program under three policies, and requires the same verdict and that
// exactly the reference's class counted one packet of the frame's length.
func FuzzClassify(f *testing.F) {
	testns.RequirePrivileged(f)
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}

	progs := []*fuzzProgram{
		{name: "drop all", policy: bpf.Policy{DropAll: true}},
		{name: "protocol list", policy: bpf.Policy{Protocols: fuzzProtocols}},
		{name: "dry run", policy: bpf.Policy{Protocols: fuzzProtocols, DryRun: true}},
	}
	// Loaded once per fuzzing process, not per input.
	for _, fp := range progs {
		p, err := bpf.Load(fp.policy)
		if err != nil {
			f.Fatalf("load %s: %v", fp.name, err)
		}
		f.Cleanup(func() { p.Close() })
		fp.prog = p
	}

	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < ethHeaderLen {
			t.Skip("BPF_PROG_TEST_RUN rejects frames shorter than an Ethernet header")
		}
		if len(frame) > fuzzMaxFrame {
			t.Skip("longer than the linear test_run buffer")
		}
		want := refClassify(frame)
		wantClass := want.class()
		for _, fp := range progs {
			if err := fp.prog.ReadCounters(&fp.before); err != nil {
				t.Fatal(err)
			}
			verdict, err := fp.prog.XDP().Run(&ebpf.RunOptions{Data: frame})
			if err != nil {
				t.Fatalf("%s: run: %v", fp.name, err)
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
				t.Fatalf("%s: frame %x: classes that counted %v, reference class %d (%+v)", fp.name, frame, moved, wantClass, want)
			}
			d := bpf.Counter{
				Packets: fp.after[wantClass].Packets - fp.before[wantClass].Packets,
				Bytes:   fp.after[wantClass].Bytes - fp.before[wantClass].Bytes,
			}
			if d != (bpf.Counter{Packets: 1, Bytes: uint64(len(frame))}) {
				t.Fatalf("%s: frame %x: class %d counted %+v, want 1 packet of %d bytes", fp.name, frame, wantClass, d, len(frame))
			}
			if v := refVerdict(want, fp.policy); verdict != v {
				t.Fatalf("%s: frame %x of class %d: verdict %d, reference %d", fp.name, frame, wantClass, verdict, v)
			}
		}
		checkTags(t, want, wantClass, "reference class")
	})
}
