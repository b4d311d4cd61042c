//go:build linux

// Package sockdiag asks the kernel's socket table whether flows belong to
// established TCP connections. A source that completed a handshake with the
// host has proven its address, which a forged source cannot do.
//
// Each flow is one exact lookup (SOCK_DIAG_BY_FAMILY with the 4-tuple, no
// dump): the kernel finds the socket by hash whatever the number of sockets,
// so the cost per flow does not grow with the host's connections.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
)

// MaxFlows bounds the flows of one call: the lookup is for a few candidates
// at decision time, never for each frame.
const MaxFlows = 64

// Timeout bounds the wait for each answer of the kernel, so that a call
// never hangs.
const Timeout = time.Second

// tcpEstablished is TCP_ESTABLISHED of include/net/tcp_states.h.
const tcpEstablished = 1

// Flow is one direction of a TCP flow as a received frame shows it: the
// remote source address and port, and the local destination address and
// port.
type Flow struct {
	Src netip.AddrPort
	Dst netip.AddrPort
}

// Established says, for each flow, whether the kernel holds an established
// TCP socket for it (local = Dst, remote = Src) in network namespace ns (a
// name of /var/run/netns, a path, or "" for the process's own). IPv4-mapped
// IPv6 addresses are unmapped first; a flow whose addresses are of two
// families, or invalid, is not established. A socket in any other state
// (a listener, a half-open request, TIME_WAIT, CLOSE_WAIT) is not
// established.
func Established(ns string, flows []Flow) ([]bool, error) {
	if len(flows) > MaxFlows {
		return nil, fmt.Errorf("sockdiag: %d flows asked at once, at most %d a call", len(flows), MaxFlows)
	}
	out := make([]bool, len(flows))
	if len(flows) == 0 {
		return out, nil
	}
	var fd int
	err := nsthread.In(ns, func() error {
		var err error
		fd, err = open()
		return err
	})
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	for i, f := range flows {
		state, err := lookup(fd, uint32(i+1), f)
		if err != nil {
			return nil, err
		}
		out[i] = state == tcpEstablished
	}
	return out, nil
}

// open returns a sock_diag netlink socket of the calling thread's namespace;
// the socket stays in that namespace whichever thread uses it afterwards.
func open() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("sockdiag: open a NETLINK_SOCK_DIAG socket: %w", err)
	}
	tv := unix.NsecToTimeval(Timeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("sockdiag: set the timeout of the NETLINK_SOCK_DIAG socket: %w", err)
		}
	}
	return fd, nil
}

// Sizes of the kernel's structures (linux/netlink.h, linux/inet_diag.h).
const (
	sizeofReq     = unix.SizeofNlMsghdr + 56 // struct inet_diag_req_v2
	sizeofDiagMsg = 72                       // struct inet_diag_msg
	noCookie      = ^uint32(0)               // INET_DIAG_NOCOOKIE
)

// lookup returns the TCP state of the socket the kernel finds for f, or 0
// when it finds none. The kernel's exact lookup ignores the states mask and
// falls back to a listener of the local port, so the state is read from the
// answer rather than trusted to the request.
func lookup(fd int, seq uint32, f Flow) (uint8, error) {
	req, ok := request(seq, f)
	if !ok {
		return 0, nil
	}
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sockdiag: ask for the TCP socket of %s -> %s: %w", f.Src, f.Dst, err)
	}
	var buf [4096]byte
	for {
		n, from, err := unix.Recvfrom(fd, buf[:], 0)
		if errors.Is(err, unix.EAGAIN) {
			return 0, fmt.Errorf("sockdiag: no answer for the TCP socket of %s -> %s within %s", f.Src, f.Dst, Timeout)
		}
		if err != nil {
			return 0, fmt.Errorf("sockdiag: read the answer for the TCP socket of %s -> %s: %w", f.Src, f.Dst, err)
		}
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue // not from the kernel
		}
		state, mine, err := parse(buf[:n], seq)
		if err != nil {
			return 0, fmt.Errorf("sockdiag: answer for the TCP socket of %s -> %s: %w", f.Src, f.Dst, err)
		}
		if mine {
			return state, nil
		}
	}
}

// request encodes the exact lookup of f: local (the frame's destination) is
// the socket's source, remote its destination. ok is false for a flow that
// no TCP socket can hold (mixed families, an invalid address).
func request(seq uint32, f Flow) (req []byte, ok bool) {
	src, dst := f.Dst.Addr().Unmap(), f.Src.Addr().Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return nil, false
	}
	family := uint8(unix.AF_INET6)
	if src.Is4() {
		family = unix.AF_INET
	}
	b := make([]byte, sizeofReq)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], sizeofReq)
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], seq)
	r := b[unix.SizeofNlMsghdr:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpEstablished)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], f.Dst.Port())
	binary.BigEndian.PutUint16(id[2:], f.Src.Port())
	putAddr(id[4:20], src)
	putAddr(id[20:36], dst)
	ne.PutUint32(id[36:], 0) // any interface
	ne.PutUint32(id[40:], noCookie)
	ne.PutUint32(id[44:], noCookie)
	return b, true
}

// putAddr writes a in the layout of inet_diag_sockid: an IPv4 address in
// the first four bytes, an IPv6 address in all sixteen.
func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// parse reads the kernel's answer to request seq: the socket's state, 0
// when there is no such socket (ENOENT). mine is false for a message that
// answers another request.
func parse(b []byte, seq uint32) (state uint8, mine bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return 0, false, fmt.Errorf("parse netlink message: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Seq != seq {
			continue
		}
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) < 4 {
				return 0, true, fmt.Errorf("netlink error message of %d bytes", len(m.Data))
			}
			errno := -int32(binary.NativeEndian.Uint32(m.Data))
			switch errno {
			case 0:
				return 0, true, errors.New("acknowledged without a socket")
			case int32(unix.ENOENT):
				return 0, true, nil
			}
			return 0, true, unix.Errno(errno)
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(m.Data) < sizeofDiagMsg {
				return 0, true, fmt.Errorf("inet_diag_msg of %d bytes, want %d", len(m.Data), sizeofDiagMsg)
			}
			return m.Data[1], true, nil // idiag_state
		default:
			return 0, true, fmt.Errorf("netlink message of type %d", m.Header.Type)
		}
	}
	return 0, false, nil
}
