// Package signame names signals as kill -l and the logs do: SIGTERM, not
// "terminated".
package signame

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Name returns the name of sig, such as SIGTERM, or its description when it
// has none.
func Name(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok && unix.SignalName(s) != "" {
		return unix.SignalName(s)
	}
	return sig.String()
}
