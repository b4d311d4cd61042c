package signame

import (
	"os"
	"syscall"
	"testing"
)

func TestName(t *testing.T) {
	for sig, want := range map[os.Signal]string{
		syscall.SIGTERM: "SIGTERM",
		syscall.SIGINT:  "SIGINT",
		syscall.SIGHUP:  "SIGHUP",
		os.Interrupt:    "SIGINT",
	} {
		if got := Name(sig); got != want {
			t.Errorf("Name(%v) = %q, want %q", sig, got, want)
		}
	}
}
