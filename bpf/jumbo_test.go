//go:build linux

package bpf_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// jumboMTU is the data-centre MTU the jumbo tests run at.
const jumboMTU = 9000

// jumboSizes are the frame lengths sent at MTU 9000; 9014 is the largest
// frame the MTU allows (9000 plus the Ethernet header).
var jumboSizes = []int{1500, 4000, 8000, 9014}

func udpFrame(size int) []byte {
	return frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(size-14-20-8)))
}

func tcpFrame(size int) []byte {
	return frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(size-14-20-20)))
}

func tcp6Frame(size int) []byte {
	return frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoTCP, frames.TCP(size-14-40-20)))
}

// jumboFlow is a frame sent count times, and the class it is counted under.
type jumboFlow struct {
	frame []byte
	count int
	class bpf.Class
}

// jumboMix is frames of every jumbo size, UDP (dropped by the tests' policy)
// and TCP over IPv4 and IPv6 (passed), interleaved with small frames.
func jumboMix() []jumboFlow {
	small := []jumboFlow{
		{udpFrame(60), 3, bpf.IPv4Class(frames.ProtoUDP)},
		{tcpFrame(60), 2, bpf.IPv4Class(frames.ProtoTCP)},
		{frames.Ether(frames.EtherARP, frames.ARPRequest()), 1, bpf.ClassL2ARP},
	}
	var mix []jumboFlow
	for i, size := range jumboSizes {
		mix = append(mix,
			jumboFlow{udpFrame(size), 5 + i, bpf.IPv4Class(frames.ProtoUDP)},
			jumboFlow{tcpFrame(size), 2 + i, bpf.IPv4Class(frames.ProtoTCP)},
			jumboFlow{tcp6Frame(size), 1, bpf.IPv6Class(frames.ProtoTCP)},
			small[i%len(small)],
		)
	}
	return mix
}

// sendOrder lays the flows' frames out round-robin, so that jumbo and small
// frames alternate on the wire.
func sendOrder(mix []jumboFlow) [][]byte {
	var out [][]byte
	left := make([]int, len(mix))
	for i, f := range mix {
		left[i] = f.count
	}
	for more := true; more; {
		more = false
		for i, f := range mix {
			if left[i] > 0 {
				out = append(out, f.frame)
				left[i]--
				more = true
			}
		}
	}
	return out
}

func expectedJumbo(mix []jumboFlow) (want bpf.Counters, total int) {
	for _, f := range mix {
		want[f.class].Packets += uint64(f.count)
		want[f.class].Bytes += uint64(f.count * len(f.frame))
		total += f.count
	}
	return want, total
}

// jumboNS is a test namespace whose veth pair runs at MTU 9000.
func jumboNS(t *testing.T) *testns.NS {
	ns := testns.New(t)
	for _, dev := range []string{testns.Dev, testns.Peer} {
		require.NoError(t, ns.SetMTU(dev, jumboMTU))
	}
	return ns
}

// sizeMix is frames of one jumbo size, UDP (dropped by the tests' policy)
// and TCP over IPv4 and IPv6 (passed), interleaved with small frames of
// other classes, so that each class's counters move by frames of that size only.
func sizeMix(i, size int) []jumboFlow {
	return []jumboFlow{
		{udpFrame(size), 5 + i, bpf.IPv4Class(frames.ProtoUDP)},
		{tcpFrame(size), 2 + i, bpf.IPv4Class(frames.ProtoTCP)},
		{tcp6Frame(size), 1 + i%2, bpf.IPv6Class(frames.ProtoTCP)},
		{frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoICMP, 0, frames.ICMPEcho(false, 18))), 2, bpf.IPv4Class(frames.ProtoICMP)},
		{frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoUDP, frames.UDP(8))), 3, bpf.IPv6Class(frames.ProtoUDP)},
		{frames.Ether(frames.EtherARP, frames.ARPRequest()), 1, bpf.ClassL2ARP},
	}
}

// TestJumboNative attaches in native mode to a veth pair at MTU 9000 and
// sends frames of 1500, 4000, 8000 and 9014 bytes, mixed with small ones,
// from the peer through an AF_PACKET socket, one size after the other and
// then all interleaved: every frame is counted under its class with its
// whole length, UDP is dropped and the rest reaches the stack whole.
func TestJumboNative(t *testing.T) {
	ns := jumboNS(t)
	policy := bpf.Policy{Protocols: []uint8{frames.ProtoUDP}}
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	defer p.Close()
	require.False(t, p.MultiBuffer(), "the single-buffer program is loaded first")
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }))
	require.Equal(t, bpf.ModeNative, p.Mode())
	require.True(t, p.MultiBuffer(), "MTU 9000 needs the multi-buffer program")
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(p.ID()), id, "ip link shows the multi-buffer program")
	t.Logf("attached: mode %s, program id %d, multi-buffer %v, MTU %d", p.Mode(), p.ID(), p.MultiBuffer(), jumboMTU)

	sock, err := ns.OpenPacketSocket(testns.Dev)
	require.NoError(t, err)
	defer sock.Close()

	var sent []jumboFlow
	var before, got bpf.Counters
	check := func(mix []jumboFlow) {
		t.Helper()
		sent = append(sent, mix...)
		require.NoError(t, ns.SendRaw(testns.Peer, sendOrder(mix)))
		want, total := expectedJumbo(sent)
		require.NoError(t, waitCounters(p, &got, uint64(total)))
		for c := range want {
			require.Equal(t, want[c], got[c], "class %d", c)
		}
	}
	for i, size := range jumboSizes {
		before = got
		check(sizeMix(i, size))
		t.Logf("%d-byte frames, counted: %s", size, describeDelta(before, got, policy,
			bpf.IPv4Class(frames.ProtoUDP), bpf.IPv4Class(frames.ProtoTCP), bpf.IPv6Class(frames.ProtoTCP)))
	}
	check(jumboMix())
	t.Logf("all sizes interleaved with small frames: %d frames counted exactly", len(sendOrder(jumboMix())))

	var wantLens, gotLens []int
	for _, f := range sent {
		if !policy.Drops(f.class) {
			for i := 0; i < f.count; i++ {
				wantLens = append(wantLens, len(f.frame))
			}
		}
	}
	received, err := sock.Receive(len(wantLens), testns.Hang)
	require.NoError(t, err)
	for _, r := range received {
		gotLens = append(gotLens, len(r))
	}
	slices.Sort(wantLens)
	slices.Sort(gotLens)
	require.Equal(t, wantLens, gotLens, "lengths of the frames that reached the stack: the passed ones, whole")
}

// describeDelta says how far the counters of classes moved between two reads.
func describeDelta(before, after bpf.Counters, policy bpf.Policy, classes ...bpf.Class) string {
	var parts []string
	for _, c := range classes {
		action := "passed"
		if policy.Drops(c) {
			action = "dropped"
		}
		parts = append(parts, fmt.Sprintf("%s/%s %s %d packets %d bytes", c.Family(), classTag(c), action,
			after[c].Packets-before[c].Packets, after[c].Bytes-before[c].Bytes))
	}
	return strings.Join(parts, "; ")
}

func classTag(c bpf.Class) string {
	if p, ok := c.Protocol(); ok {
		return fmt.Sprint(p)
	}
	return c.Name()
}

// TestJumboSingleBufferRefused shows why the multi-buffer program exists and
// what the error says without it: at MTU 9000 the veth refuses the
// single-buffer program, and the error names the MTU and the largest that works.
func TestJumboSingleBufferRefused(t *testing.T) {
	ns := jumboNS(t)
	t.Cleanup(bpf.WithoutMultiBuffer())
	p, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer p.Close()
	err = ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) })
	var refused *bpf.NativeRefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, jumboMTU, refused.MTU)
	require.True(t, refused.MTULimited())
	require.ErrorIs(t, refused.MultiBuffer, bpf.ErrNoMultiBuffer)
	require.Contains(t, err.Error(), "MTU 9000 is too large for single-buffer XDP on this device")
	require.Contains(t, err.Error(), fmt.Sprintf("the largest that works is %d", refused.MaxMTU))
	require.Contains(t, err.Error(), "lower the MTU")
	t.Logf("error: %v", err)
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, id, "nothing attached")

	// The largest MTU the error names is the one that works.
	require.NoError(t, ns.SetMTU(testns.Peer, refused.MaxMTU))
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }))
	require.False(t, p.MultiBuffer())
	require.NoError(t, p.Detach())
	require.NoError(t, ns.SetMTU(testns.Peer, refused.MaxMTU+1))
	require.Error(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }), "one more is refused")
}

// TestJumboAutoFallsBack: with the multi-buffer program unavailable (as on
// a kernel before 5.18), auto falls back to generic mode at MTU 9000, says
// why, and generic mode counts jumbo frames whole with the single-buffer
// program.
func TestJumboAutoFallsBack(t *testing.T) {
	ns := jumboNS(t)
	t.Cleanup(bpf.WithoutMultiBuffer())
	policy := bpf.Policy{Protocols: []uint8{frames.ProtoUDP}}
	p, err := bpf.Load(policy)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeAuto) }))
	require.Equal(t, bpf.ModeGeneric, p.Mode())
	require.False(t, p.MultiBuffer())
	var refused *bpf.NativeRefusedError
	require.ErrorAs(t, p.NativeError(), &refused, "why native was refused")
	require.Equal(t, jumboMTU, refused.MTU)

	mix := jumboMix()
	require.NoError(t, ns.SendRaw(testns.Peer, sendOrder(mix)))
	want, total := expectedJumbo(mix)
	var got bpf.Counters
	require.NoError(t, waitCounters(p, &got, uint64(total)))
	for c := range want {
		require.Equal(t, want[c], got[c], "class %d", c)
	}
}

// TestAutoFallsBackOnEveryRefusal: a bridge has no native XDP at all
// (EOPNOTSUPP) and a veth at MTU 9000 refuses the single-buffer program
// (ERANGE): auto falls back on both. A program in the way is not a
// refusal: auto does not fall back over it.
func TestAutoFallsBackOnEveryRefusal(t *testing.T) {
	ns := jumboNS(t)
	t.Cleanup(bpf.WithoutMultiBuffer())
	require.NoError(t, ns.AddBridge("xdptbr0"))
	for _, dev := range []string{"xdptbr0", testns.Dev} {
		p, err := bpf.Load(bpf.Policy{DropAll: true})
		require.NoError(t, err)
		require.NoError(t, ns.Do(func() error {
			if err := ns.CheckAttachable(dev); err != nil {
				return err
			}
			idx, err := ns.Netlink().LinkByName(dev)
			if err != nil {
				return err
			}
			return p.Attach(idx.Attrs().Index, bpf.ModeAuto)
		}), dev)
		require.Equal(t, bpf.ModeGeneric, p.Mode(), dev)
		require.Error(t, p.NativeError(), dev)
		t.Logf("%s: native refused: %v", dev, p.NativeError())
		if dev == testns.Dev {
			// Another program is in the way now: that is no refusal of native mode.
			other, err := bpf.Load(bpf.Policy{DropAll: true})
			require.NoError(t, err)
			err = ns.Do(func() error { return other.Attach(ns.DevIdx, bpf.ModeAuto) })
			var existing *bpf.ExistingProgramError
			require.ErrorAs(t, err, &existing)
			require.Equal(t, p.ID(), existing.ID)
			other.Close()
		}
		p.Close()
	}
}

// TestMTUWhileAttached documents what a change of MTU does to an attached
// program: the single-buffer program holds the veth's peer below its
// single-buffer limit (raising it is refused); the multi-buffer program
// lets the MTU move freely both ways, and counts on.
func TestMTUWhileAttached(t *testing.T) {
	ns := testns.New(t)
	p, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }))
	require.False(t, p.MultiBuffer(), "MTU 1500 needs no multi-buffer program")
	require.NoError(t, ns.SetMTU(testns.Dev, jumboMTU), "the receiving end's own MTU is free")
	err = ns.SetMTU(testns.Peer, jumboMTU)
	require.Error(t, err, "the kernel holds the peer's MTU below the single-buffer limit")
	t.Logf("raising the peer's MTU with the single-buffer program attached: %v", err)
	out, _ := ns.Exec("ip", "link", "set", "dev", testns.Peer, "mtu", "9000").CombinedOutput()
	t.Logf("ip link says: %s", out)
	require.NoError(t, p.Detach())

	require.NoError(t, ns.SetMTU(testns.Peer, jumboMTU))
	require.NoError(t, ns.Attach(testns.Dev, func() error { return p.Attach(ns.DevIdx, bpf.ModeNative) }))
	require.True(t, p.MultiBuffer())
	require.NoError(t, ns.SetMTU(testns.Peer, 1500), "lowered while attached")
	require.NoError(t, ns.SetMTU(testns.Peer, jumboMTU), "raised again while attached")
	require.NoError(t, ns.SendRaw(testns.Peer, [][]byte{udpFrame(9014), udpFrame(60)}))
	var got bpf.Counters
	require.NoError(t, waitCounters(p, &got, 2))
	require.Equal(t, bpf.Counter{Packets: 2, Bytes: 9014 + 60}, got[bpf.IPv4Class(frames.ProtoUDP)])
}

// xdpMd is struct xdp_md: BPF_PROG_TEST_RUN takes data_end as the length of
// the first buffer and passes the rest of the frame as fragments.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// testRunLinearMax is the most BPF_PROG_TEST_RUN puts in the first buffer
// with 4 KiB pages and MAX_SKB_FRAGS 17: a page less 256 bytes of headroom
// and the 320-byte skb_shared_info.
const testRunLinearMax = 4096 - 256 - 320

// runSplit runs frame through prog with its first linear bytes in the first
// buffer (0: as many as fit) and the rest in fragments.
func runSplit(prog *ebpf.Program, frame []byte, linear int) (uint32, error) {
	opts := &ebpf.RunOptions{Data: frame}
	if linear > 0 {
		opts.Context = xdpMd{DataEnd: uint32(linear)}
	}
	v, err := prog.Run(opts)
	if err != nil {
		return 0, fmt.Errorf("test run of %d bytes, %d in the first buffer: %w", len(frame), linear, err)
	}
	return v, nil
}

// TestClassifyMultiBuffer runs frames in several buffers through the
// multi-buffer program with BPF_PROG_TEST_RUN: whole-frame bytes for every
// size, headers read from the first buffer, and a frame whose headers do not
// fit in its first buffer counted as truncated. The single-buffer program,
// run on the same frames, counts only the first buffer: why it is not
// loaded where frames span several.
func TestClassifyMultiBuffer(t *testing.T) {
	testns.RequirePrivileged(t)
	policy := bpf.Policy{Protocols: []uint8{frames.ProtoUDP}}
	multi, err := bpf.Load(policy)
	require.NoError(t, err)
	defer multi.Close()
	require.NoError(t, multi.UseMultiBuffer())
	require.True(t, multi.MultiBuffer())
	single, err := bpf.Load(policy)
	require.NoError(t, err)
	defer single.Close()

	hop := func(size int) []byte {
		// IPv6, a 2048-byte hop-by-hop header, then UDP.
		return frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoHopOpts,
			frames.Ext(frames.ProtoHopOpts, frames.ProtoUDP, 2048, frames.UDP(size-14-40-2048-8))))
	}
	cases := []struct {
		name    string
		frame   []byte
		linear  int
		class   bpf.Class
		verdict uint32
	}{
		{"1500 B udp", udpFrame(1500), 0, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
		{"4000 B udp", udpFrame(4000), 0, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
		{"8000 B udp", udpFrame(8000), 0, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
		{"9014 B udp", udpFrame(9014), 0, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
		{"9014 B tcp", tcpFrame(9014), 0, bpf.IPv4Class(frames.ProtoTCP), xdpPass},
		{"9014 B ipv6 tcp", tcp6Frame(9014), 0, bpf.IPv6Class(frames.ProtoTCP), xdpPass},
		{"9014 B udp, 34 B first buffer", udpFrame(9014), 34, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
		{"9014 B udp, 33 B first buffer", udpFrame(9014), 33, bpf.ClassIPv4Truncated, xdpPass},
		{"9014 B udp, 14 B first buffer", udpFrame(9014), 14, bpf.ClassIPv4Truncated, xdpPass},
		{"9014 B ipv6 hop-by-hop whole in first buffer", hop(9014), 14 + 40 + 2048, bpf.IPv6Class(frames.ProtoUDP), xdpDrop},
		{"9014 B ipv6 hop-by-hop cut by the first buffer", hop(9014), 14 + 40 + 2047, bpf.ClassIPv6Truncated, xdpPass},
		{"60 B udp", udpFrame(60), 0, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
		{"60 B udp, 40 B first buffer", udpFrame(60), 40, bpf.IPv4Class(frames.ProtoUDP), xdpDrop},
	}
	var before, after bpf.Counters
	for _, c := range cases {
		require.NoError(t, multi.ReadCounters(&before))
		v, err := runSplit(multi.XDP(), c.frame, c.linear)
		require.NoError(t, err, c.name)
		require.NoError(t, multi.ReadCounters(&after))
		require.Equal(t, c.verdict, v, "%s: verdict", c.name)
		for k := range after {
			want := before[k]
			if bpf.Class(k) == c.class {
				want.Packets++
				want.Bytes += uint64(len(c.frame))
			}
			require.Equal(t, want, after[k], "%s: class %d (want class %d)", c.name, k, c.class)
		}
	}

	// The single-buffer program sees only the first buffer of a longer frame.
	require.NoError(t, single.ReadCounters(&before))
	_, err = runSplit(single.XDP(), udpFrame(9014), 0)
	require.NoError(t, err)
	require.NoError(t, single.ReadCounters(&after))
	c := bpf.IPv4Class(frames.ProtoUDP)
	require.Equal(t, uint64(testRunLinearMax), after[c].Bytes-before[c].Bytes, "single-buffer program: first buffer only")
}

// TestUseMultiBufferKeepsCounters: the switch to the multi-buffer program
// keeps what the single-buffer one counted, and refuses once attached.
func TestUseMultiBufferKeepsCounters(t *testing.T) {
	testns.RequirePrivileged(t)
	p, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer p.Close()
	single := p.ID()
	_, err = p.XDP().Run(&ebpf.RunOptions{Data: udpFrame(60)})
	require.NoError(t, err)
	require.NoError(t, p.UseMultiBuffer())
	require.NotEqual(t, single, p.ID(), "another program")
	info, err := p.XDP().Info()
	require.NoError(t, err)
	require.Equal(t, bpf.ProgramName, info.Name, "one kernel name for both variants")
	_, err = p.XDP().Run(&ebpf.RunOptions{Data: udpFrame(9014)})
	require.NoError(t, err)
	var got bpf.Counters
	require.NoError(t, p.ReadCounters(&got))
	require.Equal(t, bpf.Counter{Packets: 2, Bytes: 60 + 9014}, got[bpf.IPv4Class(frames.ProtoUDP)])
	if _, err := ebpf.NewProgramFromID(single); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the single-buffer program is still loaded (%v)", err)
	}
}
