//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// packetSlowdown is about how many times fewer frames a second txgen's
// AF_PACKET transport sends than live frames (0.65 against 6.5 million):
// sections that send a count take that many times fewer with it, so that
// they take about as long.
const packetSlowdown = 8

// sender sends frames out of a veth peer into the other end's receive
// path: with live-frames BPF_PROG_TEST_RUN of an XDP_TX program where the
// kernel grants it (the faster generator, whose one thread also runs the
// receiving NAPI), and with txgen's AF_PACKET transport where it refuses.
type sender struct {
	transport txgen.Transport
	live      *ebpf.Program // XDP_TX, kept in the dispatcher; Live only
	idle      io.Closer
	packet    *txgen.Generator // Packet only
	refused   string           // Packet: why not live frames
}

// newSender makes the sender txgen chooses (XDP_DROP_TXGEN forces one).
func (e *env) newSender() (*sender, error) {
	t, err := txgen.Choose()
	if err != nil {
		return nil, err
	}
	if t == txgen.Packet {
		g, err := txgen.New()
		if err != nil {
			return nil, err
		}
		return &sender{transport: t, packet: g, refused: liveRefusal()}, nil
	}
	gen, err := loadReturn("xdp_bench_txgen", xdpTx)
	if err != nil {
		return nil, err
	}
	idle, err := e.keepInDispatcher(gen)
	if err != nil {
		gen.Close()
		return nil, err
	}
	return &sender{transport: t, live: gen, idle: idle}, nil
}

func (s *sender) Close() error {
	if s.packet != nil {
		return s.packet.Close()
	}
	return errors.Join(s.idle.Close(), s.live.Close())
}

// isLive says whether frames go by live frames.
func (s *sender) isLive() bool { return s.transport == txgen.Live }

// String names the transport for rows and notes.
func (s *sender) String() string {
	if s.isLive() {
		return "live-frames XDP_TX"
	}
	return "AF_PACKET (txgen: sendmmsg, qdisc bypassed)"
}

// scaled is n frames for live frames, n/packetSlowdown for AF_PACKET.
func (s *sender) scaled(n uint32) uint32 {
	if s.isLive() {
		return n
	}
	return max(n/packetSlowdown, 1)
}

// run sends n copies of frame out of ifindex and times it. The calling
// thread must be locked and in the interface's namespace. Live frames
// return errInterrupted when a signal cut the run short, some frames sent;
// AF_PACKET sends every frame once, signals or not.
func (s *sender) run(frame []byte, n uint32, ifindex int) (testRun, error) {
	if s.isLive() {
		return runXDP(s.live, frame, n, true, ifindex, 64)
	}
	var c0, c1 unix.Timespec
	w0 := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
	err := s.packet.Send(ifindex, frame, int(n))
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
	wall := time.Since(w0)
	if err != nil {
		return testRun{}, err
	}
	return testRun{cpu: time.Duration(c1.Nano() - c0.Nano()), wall: wall}, nil
}

// liveRefusal says why frames do not go by live frames: XDP_DROP_TXGEN, or
// the kernel's answer to a live-frames run on an ifindex no device has
// (where they are granted, the device lookup fails first, with ENODEV).
func liveRefusal() string {
	if os.Getenv(txgen.TransportEnv) == string(txgen.Packet) {
		return txgen.TransportEnv + "=packet"
	}
	prog, err := loadReturn("xdp_bench_probe", xdpTx)
	if err != nil {
		return "live-frames test runs refused on this host"
	}
	defer prog.Close()
	_, err = runXDP(prog, make([]byte, 60), 1, true, 1<<31-1, 1)
	var errno unix.Errno
	if errors.As(err, &errno) {
		return fmt.Sprintf("live-frames test runs refused on this host (%s)", unix.ErrnoName(errno))
	}
	return "live-frames test runs refused on this host"
}
