//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// advised is a bpf error worded for the operator, with the options and
// flags that help, and still wrapping the error for errors.Is and As.
type advised struct {
	text string
	err  error
}

func (a *advised) Error() string { return a.text }
func (a *advised) Unwrap() error { return a.err }

// advise words the errors bpf returns with facts alone in the options'
// terms; any other error is returned as it is. bpf returns them unwrapped.
func advise(err error) error {
	var pinDir *bpf.PinDirError
	var unpinnable *bpf.UnpinnableError
	var replace *bpf.ReplaceError
	var mismatch *bpf.PolicyMismatchError
	switch {
	case errors.As(err, &pinDir):
		return &advised{pinDirText(pinDir), err}
	case errors.As(err, &unpinnable):
		return &advised{"pin_path unusable: " + unpinnable.Why, err}
	case errors.As(err, &replace):
		return &advised{fmt.Sprintf("replace = true, but removing XDP program id %d failed: %v", replace.ID, replace.Err), err}
	case errors.As(err, &mismatch) && len(mismatch.Constants) > 0:
		return &advised{mismatch.Error() + " (the drop list, dry_run, per_queue or the rules)", err}
	case errors.As(err, &mismatch) && mismatch.Shape:
		return &advised{mismatch.Error() + " (rules, or per_queue, differ)", err}
	}
	return err
}

// pinDirText says why pin_path cannot be used, and what to set instead.
func pinDirText(e *bpf.PinDirError) string {
	switch e.Reason {
	case bpf.PinDirPrivate:
		return fmt.Sprintf("pin_path = %q: %v: counters would not survive a restart and keep_attached could keep nothing; "+
			"run the binary in the host's mount namespace (not under ip netns exec) and reach the interfaces with the namespace option, or leave pin_path unset", e.Root, e.Err)
	case bpf.PinRootNotDir:
		return fmt.Sprintf("pin_path = %q: %v; set pin_path to a directory (created if missing), e.g. %q", e.Root, e.Err, bpf.DefaultBPFFS+"/xdp_drop")
	case bpf.PinDirNotOurs:
		return fmt.Sprintf("pin_path: %v; it is not ours, so it is left alone: move it, or choose another pin_path", e.Err)
	}
	return fmt.Sprintf("pin_path: %v", e.Err)
}

// noteText is what the operator reads of a note Acquire reports.
func (x *XDPDrop) noteText(n bpf.Note) string {
	switch n.Kind {
	case bpf.NoteUnpinned:
		lost := "counters restart at every restart"
		if x.KeepAttached {
			lost += " and nothing keeps it attached while no agent runs (keep_attached)"
		}
		return fmt.Sprintf("attaching without pins, so %s: %v", lost, advise(n.Err))
	case bpf.NoteTakenOverUnpinned:
		return fmt.Sprintf("taken over without pins, so counters restart at every restart: %v", advise(n.Err))
	case bpf.NoteKeptReleased:
		return "released the attachment an earlier run kept (keep_attached is off now)"
	case bpf.NoteReplaced:
		return fmt.Sprintf("replaced XDP program id %d (replace = true)", n.ID)
	case bpf.NoteFellBack:
		return fmt.Sprintf(`mode = "auto" fell back to generic mode (slower): %v`, n.Err)
	case bpf.NoteMountedBPFFS:
		return fmt.Sprintf("mounted the BPF filesystem on %s for pin_path", bpf.DefaultBPFFS)
	}
	return n.Text
}
