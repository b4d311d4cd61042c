// The errors and names callers branch on, declared on every platform so
// that code which tells them apart builds where XDP does not exist.

package bpf

import (
	"errors"
	"fmt"
	"strings"

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
// that policy's. Constants names the constants that differ, Shape says its
// counters are shaped otherwise, and Reason says why otherwise.
type PolicyMismatchError struct {
	ID        ebpf.ProgramID
	Constants []string
	Shape     bool
	Reason    string
}

func (e *PolicyMismatchError) Error() string {
	why := e.Reason
	switch {
	case len(e.Constants) > 0:
		why = fmt.Sprintf("its constants %s differ from this config's", strings.Join(e.Constants, ", "))
	case e.Shape:
		why = "its counters have another shape"
	}
	return fmt.Sprintf("XDP program id %d (%s) was loaded from another config, or by another version: %s", e.ID, ProgramName, why)
}

// PinDirReason is why the pin directories under a root cannot be used.
type PinDirReason int

const (
	// PinDirPrivate: the BPF filesystem there vanishes with the process;
	// Err is ErrPrivateBPFFS.
	PinDirPrivate PinDirReason = iota + 1
	// PinRootNotDir: the root itself is something other than a directory.
	PinRootNotDir
	// PinDirNotOurs: the interface's pin directory is something other than
	// a directory, which is not ours.
	PinDirNotOurs
	// PinDirKeptLinkHeld: the link an earlier run kept there is held by
	// another running process; Err is a *LiveOwnerError.
	PinDirKeptLinkHeld
)

// PinDirError says why the pin directories under Root cannot be used: the
// program is not loaded.
type PinDirError struct {
	Root   string
	Reason PinDirReason
	Err    error
}

func (e *PinDirError) Error() string { return fmt.Sprintf("pin directory root %s: %v", e.Root, e.Err) }
func (e *PinDirError) Unwrap() error { return e.Err }

// UnpinnableError says this process cannot use the pin directory (no BPF
// filesystem, no permission), and Why, with the command that fixes it: the
// program is loaded and attached without pins.
type UnpinnableError struct {
	Why string
}

func (e *UnpinnableError) Error() string { return "pin directory unusable: " + e.Why }

// ReplaceError says the program in the way, ID, could not be removed to
// attach in its place (Want.Replace).
type ReplaceError struct {
	ID  ebpf.ProgramID
	Err error
}

func (e *ReplaceError) Error() string {
	return fmt.Sprintf("removing XDP program id %d in the way failed: %v", e.ID, e.Err)
}
func (e *ReplaceError) Unwrap() error { return e.Err }
