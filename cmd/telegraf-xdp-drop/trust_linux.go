//go:build linux

package main

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// raisedCapabilities names the capabilities that let the binary attach XDP
// which the process holds without being root (file capabilities, or a
// service manager's ambient ones), or returns "" when there are none.
func raisedCapabilities() string {
	if os.Getuid() == 0 {
		return ""
	}
	var held []string
	for _, c := range []struct {
		name string
		bit  uint
	}{{"CAP_BPF", unix.CAP_BPF}, {"CAP_NET_ADMIN", unix.CAP_NET_ADMIN}, {"CAP_SYS_ADMIN", unix.CAP_SYS_ADMIN}} {
		if trust.HasCapability(c.bit) {
			held = append(held, c.name)
		}
	}
	return strings.Join(held, ", ")
}
