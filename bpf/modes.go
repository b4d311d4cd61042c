//go:build linux

package bpf

import (
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// attachMode is one XDP attach mode as each interface of the kernel names
// it: the flag that requests it (XDP_FLAGS_*, also bpf_link's) and the value
// netlink reports for a program attached in it (IFLA_XDP_ATTACHED).
type attachMode struct {
	mode     Mode
	flags    link.XDPAttachFlags
	attached uint32
}

var attachModes = [...]attachMode{
	{ModeNative, unix.XDP_FLAGS_DRV_MODE, nl.XDP_ATTACHED_DRV},
	{ModeGeneric, unix.XDP_FLAGS_SKB_MODE, nl.XDP_ATTACHED_SKB},
	{ModeOffload, unix.XDP_FLAGS_HW_MODE, nl.XDP_ATTACHED_HW},
}

// modeFlags returns the attach flags of mode; ok is false for a mode that
// is not one the kernel knows (ModeAuto is a choice between two).
func modeFlags(mode Mode) (flags link.XDPAttachFlags, ok bool) {
	for _, m := range attachModes {
		if m.mode == mode {
			return m.flags, true
		}
	}
	return 0, false
}

// attachedMode returns the mode of a program netlink reports attached with
// the IFLA_XDP_ATTACHED value attached; ok is false for none or an unknown one.
func attachedMode(attached uint32) (m attachMode, ok bool) {
	for _, m := range attachModes {
		if m.attached == attached {
			return m, true
		}
	}
	return attachMode{}, false
}
