//go:build linux

package txgen_test

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// receiver is an XDP program on the test namespace's Dev that counts every
// frame it gets and drops it, spinning spin iterations per frame first so
// that it can be made slower than the sender.
type receiver struct {
	counts *ebpf.Map
	prog   *ebpf.Program
	l      link.Link
}

func attachReceiver(t *testing.T, ns *testns.NS, spin int32) *receiver {
	t.Helper()
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	require.NoError(t, err)
	t.Cleanup(func() { counts.Close() })
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R6, spin),
		asm.JEq.Imm(asm.R6, 0, "count").WithSymbol("spin"),
		asm.Sub.Imm(asm.R6, 1),
		asm.Ja.Label("spin"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word).WithSymbol("count"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("out"), // XDP_DROP
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "Dual BSD/GPL", Instructions: insns})
	require.NoError(t, err)
	t.Cleanup(func() { prog.Close() })
	r := &receiver{counts: counts, prog: prog}
	require.NoError(t, ns.Attach(testns.Dev, func() error {
		r.l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ns.DevIdx, Flags: link.XDPDriverMode})
		return err
	}))
	t.Cleanup(func() { r.l.Close() })
	return r
}

func (r *receiver) count(t *testing.T) uint64 {
	t.Helper()
	var perCPU []uint64
	require.NoError(t, r.counts.Lookup(uint32(0), &perCPU))
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n
}

// TestSendExactUnderSignals: signals aimed at the sending thread while it
// sends (as a child's SIGCHLD or the Go runtime's preemption can be) must
// not make Send transmit any frame twice nor lose one: the receiving
// program counts exactly what was asked, whichever transport sends.
func TestSendExactUnderSignals(t *testing.T) {
	ns := testns.New(t)
	gen, err := txgen.NewCounting()
	require.NoError(t, err)
	defer gen.Close()
	t.Logf("transport: %s", gen.Transport())
	r := attachReceiver(t, ns, 0)
	udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))

	const rounds, per = 20, 2000
	var tid atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	var kicks atomic.Int64
	go func() {
		defer close(done)
		// Bounded, so that a Send that restarts on every signal still ends,
		// and the test reports the frames sent twice instead of hanging.
		for quit := time.After(10 * time.Second); ; {
			select {
			case <-stop:
				return
			case <-quit:
				return
			default:
			}
			if id := tid.Load(); id != 0 && unix.Tgkill(os.Getpid(), int(id), unix.SIGURG) == nil {
				kicks.Add(1)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	err = ns.Do(func() error {
		tid.Store(int64(unix.Gettid()))
		defer tid.Store(0)
		for range rounds {
			if err := gen.Send(ns.PeerIdx, udp, per); err != nil {
				return err
			}
		}
		return nil
	})
	close(stop)
	<-done
	require.NoError(t, err)
	sent, err := gen.Sent()
	require.NoError(t, err)
	t.Logf("%d signals aimed at the sending thread during %d sends of %d frames", kicks.Load(), rounds, per)
	require.Positive(t, kicks.Load(), "no signal reached the sending thread: the test proves nothing")
	require.Equal(t, uint64(rounds*per), sent, "frames transmitted")
	require.Equal(t, uint64(rounds*per), r.count(t), "frames the receiving program counted")
}

// TestSendBackpressure: a receiver far slower than the sender fills the
// veth's ring; Send must wait for room rather than lose frames, so the
// receiver still counts exactly what was sent.
func TestSendBackpressure(t *testing.T) {
	ns := testns.New(t)
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	t.Logf("transport: %s", gen.Transport())
	r := attachReceiver(t, ns, 20000)
	udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	before, err := ns.Stats(testns.Peer)
	require.NoError(t, err)

	cpus, err := txgen.AllowedCPUs()
	require.NoError(t, err)
	if len(cpus) < 2 {
		t.Fatalf("needs 2 CPUs to send from (one sender's receive runs on its own CPU, in step): the affinity mask allows %v", cpus)
	}
	// Two senders on two CPUs into one queue: its NAPI runs on one of them
	// while the other fills the ring.
	const per = 20000
	const n = 2 * per
	errs := make(chan error, 2)
	for _, cpu := range cpus[:2] {
		go func() {
			errs <- ns.Do(func() error {
				return txgen.OnCPU(cpu, func() error { return gen.Send(ns.PeerIdx, udp, per) })
			})
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	after, err := ns.Stats(testns.Peer)
	require.NoError(t, err)
	t.Logf("the sending end counted %d frames dropped (refused and sent again)", after.TxDropped-before.TxDropped)
	require.Eventually(t, func() bool { return r.count(t) >= n }, testns.Hang, 10*time.Millisecond,
		"the receiving program counted %d of %d frames", r.count(t), n)
	require.Equal(t, uint64(n), r.count(t), "frames the receiving program counted")
	if gen.Transport() == txgen.Packet {
		require.Positive(t, after.TxDropped-before.TxDropped, "the ring never filled: the test proves nothing")
	}
}

// TestSendKinds: tagged and full-size frames arrive whole and counted, and
// a frame too short for its Ethernet header is refused.
func TestSendKinds(t *testing.T) {
	ns := testns.New(t)
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	r := attachReceiver(t, ns, 0)
	tagged := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(0)), frames.Tag{TPID: frames.Ether8021Q, VID: 7})
	udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(1400)))
	require.NoError(t, ns.Do(func() error {
		if err := gen.Send(ns.PeerIdx, tagged, 300); err != nil {
			return err
		}
		return gen.Send(ns.PeerIdx, udp, 300)
	}))
	require.Equal(t, uint64(600), r.count(t))
	require.Error(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, udp[:13], 1) }), "a frame shorter than its Ethernet header")
}

// TestSendTwoNamespaces: one generator sending to the same ifindex in two
// namespaces reaches each one's device, never the other's, and a device
// that went away fails the send with its error.
func TestSendTwoNamespaces(t *testing.T) {
	a, b := testns.New(t), testns.New(t)
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	ra, rb := attachReceiver(t, a, 0), attachReceiver(t, b, 0)
	udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	for range 3 {
		require.NoError(t, a.Do(func() error { return gen.Send(a.PeerIdx, udp, 100) }))
		require.NoError(t, b.Do(func() error { return gen.Send(b.PeerIdx, udp, 200) }))
	}
	require.Equal(t, uint64(300), ra.count(t))
	require.Equal(t, uint64(600), rb.count(t))

	require.NoError(t, a.DelLink(testns.Peer))
	require.Error(t, a.Do(func() error { return gen.Send(a.PeerIdx, udp, 1) }), "a send to a device that is gone")
	require.NoError(t, b.Do(func() error { return gen.Send(b.PeerIdx, udp, 1) }))
	require.Equal(t, uint64(601), rb.count(t))
}

// TestNewPacket: NewPacket sends by AF_PACKET, also where live frames are
// granted, and sends exactly what it is asked to.
func TestNewPacket(t *testing.T) {
	ns := testns.New(t)
	gen := txgen.NewPacket()
	defer gen.Close()
	require.Equal(t, txgen.Packet, gen.Transport())
	r := attachReceiver(t, ns, 0)
	udp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, udp, 1000) }))
	require.Equal(t, uint64(1000), r.count(t))
}
