//go:build linux

// Package e2ens holds the safety check of the end-to-end run's traffic
// tools: they act only on a veth of the run's own network namespace.
package e2ens

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
)

// CheckVeth returns the index of the veth name, after checking that this
// process runs in the network namespace ip netns calls netns, and not in
// the initial one, which carries the machine's own network.
func CheckVeth(netns, name string) (int, error) {
	if err := CheckNetns(netns); err != nil {
		return 0, err
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("interface %q: %w", name, err)
	}
	if l.Type() != "veth" {
		return 0, fmt.Errorf("refusing to use %q: it is a %s, not a veth", name, l.Type())
	}
	return l.Attrs().Index, nil
}

// CheckNetns checks that this process runs in the network namespace ip
// netns calls netns, and not in the initial one.
func CheckNetns(netns string) error {
	self, err := nsID("/proc/self/ns/net")
	if err != nil {
		return err
	}
	named, err := nsID("/run/netns/" + netns)
	if err != nil {
		return fmt.Errorf("network namespace %q: %w", netns, err)
	}
	if self != named {
		return fmt.Errorf("refusing to run: this process is not in network namespace %q; run under ip netns exec %s", netns, netns)
	}
	// PID 1's namespace is the initial one; some containers hide it.
	if initial, err := nsID("/proc/1/ns/net"); err == nil && initial == self {
		return errors.New("refusing to run in the initial network namespace")
	}
	return nil
}

// nsID identifies a namespace file by device and inode.
func nsID(path string) ([2]uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return [2]uint64{}, err
	}
	return [2]uint64{st.Dev, st.Ino}, nil
}
