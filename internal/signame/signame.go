// Package signame names signals as kill -l and the logs do: SIGTERM, not
// "terminated".
package signame

import (
	"os"
	"syscall"
)

// Name returns the name of sig, such as SIGTERM, or its description when it
// has none.
func Name(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok && signalName(s) != "" {
		return signalName(s)
	}
	return sig.String()
}
