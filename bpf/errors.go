// The errors and names callers branch on, declared on every platform so
// that code which tells them apart builds where XDP does not exist.

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// ProgramName is the kernel name of the XDP program, as bpftool shows it.
const ProgramName = "xdp_drop"

// ErrPermission is returned when the process may not load or attach BPF programs.
// CAP_PERFMON is among them because the verifier allows the program's
// variable-offset packet reads (IPv4 options, IPv6 extension headers) only
// to "root", which it takes to mean CAP_PERFMON.
var ErrPermission = errors.New("operation not permitted: needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (or root)")

// ExistingProgramError is returned when the interface already runs an XDP
// program that this Program did not attach.
type ExistingProgramError struct {
	ID   ebpf.ProgramID
	Name string
	// Uninspectable: this process may not open the program to read its
	// name (that needs CAP_SYS_ADMIN), so whose it is cannot be told.
	Uninspectable bool
}

func (e *ExistingProgramError) Error() string {
	if e.Uninspectable {
		return fmt.Sprintf("interface already has XDP program id %d, which this process may not inspect (needs CAP_SYS_ADMIN)", e.ID)
	}
	if e.Name == "" {
		return fmt.Sprintf("interface already has XDP program id %d", e.ID)
	}
	return fmt.Sprintf("interface already has XDP program id %d (%s)", e.ID, e.Name)
}

// ErrObserveNeedsSysAdmin is returned when the program attached to an
// interface cannot be opened: only CAP_SYS_ADMIN opens a program by its id.
var ErrObserveNeedsSysAdmin = errors.New("opening another process's XDP program by its id needs CAP_SYS_ADMIN")

// PolicyMismatchError says the xdp_drop program attached to an interface
// was not loaded from the policy given: its counters cannot be read as
// that policy's.
type PolicyMismatchError struct {
	ID     ebpf.ProgramID
	Reason string
}

func (e *PolicyMismatchError) Error() string {
	return fmt.Sprintf("XDP program id %d (%s) was loaded from another config, or by another version: %s", e.ID, ProgramName, e.Reason)
}
