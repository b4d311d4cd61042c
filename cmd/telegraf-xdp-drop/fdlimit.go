//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseFDLimit lifts the soft RLIMIT_NOFILE to the hard limit (the Go
// runtime stops one short of it): each attached interface holds
// bpf.FDsPerInterface descriptors.
func raiseFDLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return nil
}
