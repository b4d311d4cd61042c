//go:build linux

package main

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// raisedCapabilities names the capabilities that let the binary attach XDP
// which the process holds without being root (file capabilities, or a
// service manager's ambient ones), or returns "" when there are none.
func raisedCapabilities() string {
	if os.Getuid() == 0 {
		return ""
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return ""
	}
	var held []string
	for _, c := range []struct {
		name string
		bit  uint
	}{{"CAP_BPF", unix.CAP_BPF}, {"CAP_NET_ADMIN", unix.CAP_NET_ADMIN}, {"CAP_SYS_ADMIN", unix.CAP_SYS_ADMIN}} {
		if data[c.bit/32].Effective&(1<<(c.bit%32)) != 0 {
			held = append(held, c.name)
		}
	}
	return strings.Join(held, ", ")
}
