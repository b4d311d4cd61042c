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
// ifindex, in sendmmsg batches, past the qdisc. Every frame the device
// refuses (ENOBUFS: veth's peer ring or backlog full, counted as dropped
// there) is refused whole and written again; one it takes is never
// written twice, since sendmmsg says how many it took, signals or not.
func (g *Generator) sendPacket(ifindex int, frame []byte, count int) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		return fmt.Errorf("packet socket: PACKET_QDISC_BYPASS: %w", err)
	}
	// Protocol 0: the socket only sends; it receives nothing.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		return fmt.Errorf("bind packet socket to ifindex %d: %w", ifindex, err)
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
			return fmt.Errorf("after %d: sendmmsg: %w", count-left, err)
		}
	}
	runtime.KeepAlive(frame)
	runtime.KeepAlive(&iov)
	return nil
}

func sendmmsg(fd int, msgs []mmsghdr) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
	runtime.KeepAlive(msgs)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
