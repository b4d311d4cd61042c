//go:build linux

package testns

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// PacketSocket sees the frames that reach an interface's network stack, that
// is, the frames an XDP program passed.
type PacketSocket struct {
	fd int
}

// OpenPacketSocket opens an AF_PACKET socket bound to ifname in the namespace.
func (n *NS) OpenPacketSocket(ifname string) (*PacketSocket, error) {
	var s *PacketSocket
	err := n.Do(func() error {
		l, err := n.nl.LinkByName(ifname)
		if err != nil {
			return err
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(proto))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: l.Attrs().Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind packet socket to %s: %w", ifname, err)
		}
		s = &PacketSocket{fd: fd}
		return nil
	})
	return s, err
}

// Receive reads incoming frames until it has want of them, then returns
// them with any further frames already queued. It fails when fewer than want
// arrive within d.
func (s *PacketSocket) Receive(want int, d time.Duration) ([][]byte, error) {
	var got [][]byte
	deadline := time.Now().Add(d)
	for {
		frame, ok, err := s.next()
		if err != nil {
			return got, err
		}
		if ok {
			got = append(got, frame)
			continue
		}
		if len(got) >= want {
			return got, nil // and nothing more queued
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%d of %d frames arrived within %v", len(got), want, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// next returns the next queued incoming frame, if any.
func (s *PacketSocket) next() ([]byte, bool, error) {
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return buf[:n], true, nil
	}
}

// Close closes the socket.
func (s *PacketSocket) Close() error { return unix.Close(s.fd) }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// SendRaw transmits frames out of ifname in the namespace through an
// AF_PACKET socket, as they are: the way to send frames longer than a page,
// which live-frames BPF_PROG_TEST_RUN cannot. The frames arrive at ifname's
// veth peer.
func (n *NS) SendRaw(ifname string, frames [][]byte) error {
	return n.Do(func() error {
		l, err := n.nl.LinkByName(ifname)
		if err != nil {
			return err
		}
		// Protocol 0: the socket sends only, it receives nothing.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}
		for i, f := range frames {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return fmt.Errorf("send frame %d (%d bytes) on %s: %w", i, len(f), ifname, err)
			}
		}
		return nil
	})
}

// SetMTU sets the MTU of an interface of the namespace.
func (n *NS) SetMTU(ifname string, mtu int) error {
	l, err := n.nl.LinkByName(ifname)
	if err != nil {
		return err
	}
	if err := n.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("set MTU of %s to %d: %w", ifname, mtu, err)
	}
	return nil
}
