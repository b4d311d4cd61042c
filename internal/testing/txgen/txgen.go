//go:build linux

// Package txgen sends real frames through a veth pair, out of one end into
// the other end's receive path, by one of two transports: BPF_PROG_TEST_RUN
// in live-frames mode (a program that returns XDP_TX), or an AF_PACKET
// socket where the kernel refuses live frames. What to send (the standard
// mix and what it must count) is package traffic.
package txgen

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
)

// TransportEnv chooses the transport: "live" forces live frames (and fails
// where the kernel refuses them), "packet" forces AF_PACKET; unset, live
// frames are used where the kernel grants them and AF_PACKET elsewhere.
const TransportEnv = "XDP_DROP_TXGEN"

// Transport is how a Generator hands frames to the device.
type Transport string

const (
	// Live runs an XDP_TX program with BPF_PROG_TEST_RUN's live-frames
	// mode: several million frames a second, but a host security policy
	// may refuse it.
	Live Transport = "live"
	// Packet writes frames to an AF_PACKET socket bound to the device
	// (sendmmsg, PACKET_QDISC_BYPASS): about half a million a second.
	Packet Transport = "packet"
)

// Generator transmits frames out of an interface.
type Generator struct {
	transport Transport
	prog      *ebpf.Program // XDP_TX, for Live
	runs      *ebpf.Map     // Live: per-CPU count of frames transmitted; nil unless counting
	counting  bool
	handed    atomic.Uint64 // Packet: frames the device accepted
	mu        sync.Mutex
	socks     map[sockKey]int // Packet: a socket per device sent from, until Close
}

// New makes a generator with the transport TransportEnv chooses.
func New() (*Generator, error) { return newGenerator(false) }

// NewCounting makes a generator that also counts every frame it transmits,
// so that Sent reports what really left: BPF_PROG_TEST_RUN restarts a run a
// signal interrupted, sending more than asked.
func NewCounting() (*Generator, error) { return newGenerator(true) }

// NewPacket makes a generator that sends by AF_PACKET whatever the kernel
// grants: frames that go through the receiving veth's stack as any the
// host sends do (live frames reach a veth without XDP only with GRO on).
func NewPacket() *Generator { return &Generator{transport: Packet} }

func newGenerator(counting bool) (*Generator, error) {
	t, err := Choose()
	if err != nil {
		return nil, err
	}
	g := &Generator{transport: t, counting: counting}
	if t == Packet {
		return g, nil
	}
	if counting {
		g.runs, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
		if err != nil {
			return nil, fmt.Errorf("create the generator's frame counter: %w", err)
		}
	}
	g.prog, err = txProgram(g.runs)
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Transport says how this generator sends.
func (g *Generator) Transport() Transport { return g.transport }

// Choose returns the transport TransportEnv asks for, or, unset, Live where
// a probe finds the kernel grants live frames and Packet where it refuses
// them. The probe runs once a process.
func Choose() (Transport, error) {
	switch v := os.Getenv(TransportEnv); v {
	case "packet":
		return Packet, nil
	case "live":
		if err := probeLive(); err != nil {
			return "", fmt.Errorf("%s=live, but %w", TransportEnv, err)
		}
		return Live, nil
	case "":
		err := probeLive()
		if err == nil {
			return Live, nil
		}
		if errors.Is(err, errLiveRefused) {
			return Packet, nil
		}
		return "", err
	default:
		return "", fmt.Errorf("%s=%s: want live, packet or unset", TransportEnv, v)
	}
}

var errLiveRefused = errors.New("the kernel refuses live-frames test runs")

var probe = sync.OnceValue(func() error {
	prog, err := txProgram(nil)
	if err != nil {
		return err
	}
	defer prog.Close()
	// An ifindex no device has: where live frames are granted the kernel
	// looks the device up (ENODEV) before it sends anything; a refusal
	// comes first.
	frame := make([]byte, 60)
	_, err = prog.Run(&ebpf.RunOptions{
		Data: frame, Repeat: 1, Flags: unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		Context: &XdpMd{DataEnd: uint32(len(frame)), IngressIfindex: 1<<31 - 1},
	})
	switch {
	case errors.Is(err, unix.ENODEV):
		return nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP),
		errors.Is(err, unix.Errno(524)), errors.Is(err, ebpf.ErrNotSupported): // 524: the kernel's ENOTSUPP
		return fmt.Errorf("%w (%w)", errLiveRefused, err)
	case err == nil:
		return errors.New("probe of live frames: a run on an ifindex no device has succeeded")
	default:
		return fmt.Errorf("probe of live frames: %w", err)
	}
})

func probeLive() error { return probe() }

// Sent returns how many frames a counting generator has transmitted.
func (g *Generator) Sent() (uint64, error) {
	if !g.counting {
		return 0, errors.New("not a counting generator (NewCounting)")
	}
	if g.transport == Packet {
		return g.handed.Load(), nil
	}
	var perCPU []uint64
	if err := g.runs.Lookup(uint32(0), &perCPU); err != nil {
		return 0, fmt.Errorf("read the generator's frame counter: %w", err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// Close releases the generator. A socket it keeps holds its network
// namespace alive: close the generator before the namespace goes.
func (g *Generator) Close() error {
	g.closeSockets()
	if g.runs != nil {
		g.runs.Close()
	}
	if g.prog != nil {
		return g.prog.Close()
	}
	return nil
}

// Send transmits count copies of frame out of the interface ifindex and
// returns once the device has taken every one, each once. The calling
// thread must be in the interface's network namespace.
func (g *Generator) Send(ifindex int, frame []byte, count int) error {
	if len(frame) < 14 {
		return errors.New("a frame needs at least its 14-byte Ethernet header")
	}
	if count <= 0 {
		return nil
	}
	var err error
	if g.transport == Packet {
		err = g.sendPacket(ifindex, frame, count)
	} else {
		err = g.sendLive(ifindex, frame, count)
	}
	if err != nil {
		return fmt.Errorf("send %d frames out of ifindex %d (%s): %w", count, ifindex, g.transport, err)
	}
	return nil
}

// SendFlows sends every flow of a mix out of ifindex, in order.
func (g *Generator) SendFlows(ifindex int, flows []traffic.Flow) error {
	for _, f := range flows {
		if err := g.Send(ifindex, f.Frame, f.Count); err != nil {
			return fmt.Errorf("flow %s: %w", f.Name, err)
		}
	}
	return nil
}

// txProgram loads the XDP_TX program, counting into runs when not nil.
func txProgram(runs *ebpf.Map) (*ebpf.Program, error) {
	insns := asm.Instructions{
		asm.LoadImm(asm.R0, 3, asm.DWord), // XDP_TX
		asm.Return(),
	}
	name := "xdp_drop_txgen"
	if runs != nil {
		name = "xdp_drop_txcnt"
		insns = asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word), // key 0
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, runs.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "tx"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),         // per-CPU: no atomic needed
			asm.LoadImm(asm.R0, 3, asm.DWord).WithSymbol("tx"), // XDP_TX
			asm.Return(),
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.XDP, License: "Dual BSD/GPL", Instructions: insns})
	if err != nil {
		return nil, fmt.Errorf("load the XDP_TX generator: %w", err)
	}
	return prog, nil
}
