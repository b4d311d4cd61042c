//go:build linux

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// existingProgram describes the XDP program attached to ifindex, or returns
// nil when there is none.
func existingProgram(ifindex int) *ExistingProgramError {
	id, _, err := xdpProgramOn(ifindex)
	if err != nil || id == 0 {
		return nil
	}
	e := &ExistingProgramError{ID: id}
	prog, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, unix.EPERM) {
		e.Uninspectable = true
		return e
	}
	if err == nil {
		if info, err := prog.Info(); err == nil {
			e.Name = info.Name
		}
		prog.Close()
	}
	return e
}

// xdpProgramOn returns the id and netlink attach mode of the XDP program on ifindex.
func xdpProgramOn(ifindex int) (ebpf.ProgramID, uint32, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, 0, fmt.Errorf("look up interface %d: %w", ifindex, err)
	}
	xdp := l.Attrs().Xdp
	if xdp == nil || !xdp.Attached {
		return 0, 0, nil
	}
	return ebpf.ProgramID(xdp.ProgId), xdp.AttachMode, nil
}

// XDPProgramID returns the id of the XDP program attached to ifindex, 0 if none.
func XDPProgramID(ifindex int) (ebpf.ProgramID, error) {
	id, _, err := xdpProgramOn(ifindex)
	return id, err
}

// ErrLinkNeedsSysAdmin is returned when a program attached through a
// bpf_link is in the way and this process, without CAP_SYS_ADMIN, may not
// open links.
var ErrLinkNeedsSysAdmin = errors.New("it is attached through a bpf_link, which only its owner or a process with CAP_SYS_ADMIN can detach, and this process lacks CAP_SYS_ADMIN")

// removeExisting detaches whatever XDP program is attached to ifindex: a
// bpf_link owned by another process is detached through the link, a program
// attached through netlink is removed through netlink. Without
// CAP_SYS_ADMIN links cannot be listed; netlink still removes a program
// attached through it (CAP_NET_ADMIN suffices) and refuses a link's.
func removeExisting(ifindex int) error {
	id, mode, err := xdpProgramOn(ifindex)
	if err != nil || id == 0 {
		return err
	}
	linksDenied := false
	if l, err := findXDPLink(ifindex, id); errors.Is(err, unix.EPERM) {
		linksDenied = true
	} else if err != nil {
		return err
	} else if l != nil {
		defer l.Close()
		if err := l.Detach(); err != nil {
			return fmt.Errorf("detach XDP link of program %d: %w", id, err)
		}
		return nil
	}
	nl, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("look up interface %d: %w", ifindex, err)
	}
	err = netlink.LinkSetXdpFdWithFlags(nl, -1, netlinkFlags(mode))
	if linksDenied && errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("remove XDP program %d: %w; as root, find its link with bpftool link show and run: bpftool link detach id LINK_ID", id, ErrLinkNeedsSysAdmin)
	}
	if err != nil {
		return fmt.Errorf("remove XDP program %d: %w", id, err)
	}
	return nil
}

// netlinkFlags returns the XDP_FLAGS_* mode flag of a program netlink
// reports attached with the IFLA_XDP_ATTACHED value attached, 0 if unknown.
func netlinkFlags(attached uint32) int {
	m, _ := attachedMode(attached)
	return int(m.flags)
}

// findXDPLink finds the XDP link that attaches program id to ifindex.
// Interface indexes repeat across network namespaces and link info carries
// no namespace, so the program id (unique system-wide, read from this
// namespace's interface) is what singles the link out.
func findXDPLink(ifindex int, id ebpf.ProgramID) (link.Link, error) {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		if xdp := info.XDP(); xdp != nil && int(xdp.Ifindex) == ifindex && info.Program == id {
			return it.Take(), nil
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return nil, fmt.Errorf("list BPF links: %w", err)
	}
	return nil, nil
}
