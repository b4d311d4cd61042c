//go:build linux

package txgen

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// packetBatch is the most frames one sendmmsg call hands over.
const packetBatch = 512

// Stall is how long the device may refuse every frame (its queue or its
// peer's ring full) before a send gives up: far beyond any backlog a
// receiver drains, so only a receiver that stopped reaches it.
const Stall = 10 * time.Second

// mmsghdr is struct mmsghdr, what sendmmsg takes.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// sendPacket writes count copies of frame to an AF_PACKET socket bound to
// ifindex, in sendmmsg batches, past the qdisc. The calling thread must
// stay on one OS thread (ns.Do's do) from the namespace lookup to the send. Every frame the device
// refuses (ENOBUFS: veth's peer ring or backlog full, counted as dropped
// there) is refused whole and written again; one it takes is never
// written twice, since sendmmsg says how many it took, signals or not.
func (g *Generator) sendPacket(ifindex int, frame []byte, count int) error {
	fd, err := g.socket(ifindex)
	if err != nil {
		return err
	}
	iov := unix.Iovec{Base: &frame[0]}
	iov.SetLen(len(frame))
	msgs := make([]mmsghdr, min(count, packetBatch))
	for i := range msgs {
		msgs[i].hdr.Iov = &iov
		msgs[i].hdr.SetIovlen(1)
	}
	var refused time.Time
	for left := count; left > 0; {
		n, err := sendmmsg(fd, msgs[:min(left, len(msgs))])
		if n > 0 {
			left -= n
			g.handed.Add(uint64(n))
			refused = time.Time{}
			continue
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.EAGAIN):
			if refused.IsZero() {
				refused = time.Now()
			} else if time.Since(refused) > Stall {
				return fmt.Errorf("after %d: the device refused every frame for %v (%w): is the receiving end up and its program running?", count-left, Stall, err)
			}
			time.Sleep(20 * time.Microsecond)
		default:
			if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) {
				g.forget(ifindex) // the device went away: its socket is unbound
			}
			return fmt.Errorf("after %d: sendmmsg: %w", count-left, err)
		}
	}
	runtime.KeepAlive(frame)
	runtime.KeepAlive(&iov)
	return nil
}

// sockKey names a device: its network namespace (as the calling thread's
// /proc entry identifies it) and its ifindex there.
type sockKey struct {
	dev, ino uint64
	ifindex  int
}

// socket returns the generator's AF_PACKET socket bound to ifindex in the
// calling thread's namespace, opening it the first time. Sockets are kept
// until Close, since closing one waits for an RCU grace period (tens of
// milliseconds): a send per socket would cost that each time.
func (g *Generator) socket(ifindex int) (int, error) {
	k, err := keyOf(ifindex)
	if err != nil {
		return -1, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if fd, ok := g.socks[k]; ok {
		return fd, nil
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("packet socket: PACKET_QDISC_BYPASS: %w", err)
	}
	// Protocol 0: the socket only sends; it receives nothing.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind packet socket to ifindex %d: %w", ifindex, err)
	}
	if g.socks == nil {
		g.socks = make(map[sockKey]int)
	}
	g.socks[k] = fd
	return fd, nil
}

// forget closes the socket of ifindex in the calling thread's namespace.
func (g *Generator) forget(ifindex int) {
	k, err := keyOf(ifindex)
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if fd, ok := g.socks[k]; ok {
		unix.Close(fd)
		delete(g.socks, k)
	}
}

// closeSockets closes every socket the generator opened.
func (g *Generator) closeSockets() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, fd := range g.socks {
		unix.Close(fd)
		delete(g.socks, k)
	}
}

func keyOf(ifindex int) (sockKey, error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); err != nil {
		return sockKey{}, fmt.Errorf("identify the sending thread's network namespace: %w", err)
	}
	return sockKey{dev: st.Dev, ino: st.Ino, ifindex: ifindex}, nil
}

func sendmmsg(fd int, msgs []mmsghdr) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
	runtime.KeepAlive(msgs)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
