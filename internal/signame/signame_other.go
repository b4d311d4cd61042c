//go:build !unix

package signame

import "syscall"

// signalName is empty where the system has no signal names: Name then
// gives the signal's description.
func signalName(syscall.Signal) string { return "" }
