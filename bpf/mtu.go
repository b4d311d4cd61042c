//go:build linux

package bpf

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// standardMTU is the Ethernet MTU every driver's single-buffer XDP takes.
const standardMTU = 1500

// NativeRefusedError is a native attach the driver refused, with what is
// known of the MTU: single-buffer XDP needs each frame in one buffer, so
// drivers refuse it above an MTU of their own (veth: about 3500 on 4 KiB pages).
type NativeRefusedError struct {
	Err         error // the driver's refusal of the single-buffer program
	MultiBuffer error // why the multi-buffer program did not take instead
	MTU         int   // the MTU the driver checks (a veth's peer's), 0 if unknown
	MaxMTU      int   // the largest MTU single-buffer XDP takes there, 0 if unknown
}

func (e *NativeRefusedError) Error() string {
	msg := fmt.Sprintf("native XDP refused: %v", e.Err)
	if !e.MTULimited() {
		return msg
	}
	msg += fmt.Sprintf("; MTU %d is too large for single-buffer XDP on this device", e.MTU)
	if e.MaxMTU > 0 {
		msg += fmt.Sprintf(" (the largest that works is %d)", e.MaxMTU)
	}
	msg += fmt.Sprintf(", and %v", e.MultiBuffer)
	if e.MaxMTU > 0 {
		return msg + fmt.Sprintf(": lower the MTU to %d or less, or run a kernel with multi-buffer XDP for this driver", e.MaxMTU)
	}
	return msg + ": lower the MTU, or run a kernel with multi-buffer XDP for this driver"
}

func (e *NativeRefusedError) Unwrap() error { return e.Err }

// MTULimited reports whether the MTU is the likely reason for the refusal:
// above what the device's single-buffer XDP takes, or, where that limit is
// unknown, above the standard Ethernet MTU.
func (e *NativeRefusedError) MTULimited() bool {
	if e.MaxMTU > 0 {
		return e.MTU > e.MaxMTU
	}
	return e.MTU > standardMTU
}

// nativeError describes a native refusal of the single-buffer program on
// ifindex; multiBuffer says why the multi-buffer variant did not take.
func nativeError(ifindex int, err, multiBuffer error) error {
	e := &NativeRefusedError{Err: err, MultiBuffer: multiBuffer}
	l, lerr := netlink.LinkByIndex(ifindex)
	if lerr != nil {
		return e
	}
	e.MTU = l.Attrs().MTU
	if l.Type() == "veth" {
		// veth checks its peer's MTU against its own page-sized buffers.
		if peer := vethPeer(l); peer != nil {
			e.MTU = peer.Attrs().MTU
		}
		e.MaxMTU = vethMaxMTU()
	}
	return e
}

// vethPeer returns the peer of a veth when it is in the same namespace.
func vethPeer(l netlink.Link) netlink.Link {
	a := l.Attrs()
	if a.ParentIndex == 0 || a.NetNsID >= 0 {
		return nil
	}
	peer, err := netlink.LinkByIndex(a.ParentIndex)
	if err != nil {
		return nil
	}
	return peer
}

// maxSKBFrags is the kernel's MAX_SKB_FRAGS as its sysctl shows it, read
// at start: the sysctl is visible only in the initial network namespace,
// and threads move to others. It starts at MAX_SKB_FRAGS, which sizes
// skb_shared_info; lowered by hand, it makes vethMaxMTU too high (a smaller
// skb_shared_info than the kernel's), never too low. 17, the kernel's
// default, when unreadable.
var maxSKBFrags = func() int {
	n, err := readInt("/proc/sys/net/core/max_skb_frags")
	if err != nil || n <= 0 {
		return 17
	}
	return n
}()

// vethMaxMTU is the largest peer MTU veth takes for single-buffer XDP:
// a page less XDP headroom, the skb_shared_info at its end and the
// Ethernet header (drivers/net/veth.c, veth_xdp_set).
func vethMaxMTU() int {
	frags := maxSKBFrags
	const (
		xdpHeadroom   = 256
		cacheLine     = 64
		sharedInfoHdr = 48 // struct skb_shared_info up to its frags array
		fragSize      = 16 // skb_frag_t
		ethHeader     = 14
	)
	shared := (sharedInfoHdr + fragSize*frags + cacheLine - 1) / cacheLine * cacheLine
	return os.Getpagesize() - xdpHeadroom - shared - ethHeader
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
