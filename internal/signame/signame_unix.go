//go:build unix

package signame

import (
	"syscall"

	"golang.org/x/sys/unix"
)

func signalName(s syscall.Signal) string { return unix.SignalName(s) }
