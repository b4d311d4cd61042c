//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
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
		return fmt.Sprintf("pin_path = %s: %v: counters would not survive a restart and keep_attached could keep nothing; "+
			"run the binary in the host's mount namespace (not under ip netns exec) and reach the interfaces with the namespace option, or leave pin_path unset", quote.Value(e.Root), e.Err)
	case bpf.PinRootNotDir:
		return fmt.Sprintf("pin_path = %s: %v; set pin_path to a directory (created if missing), e.g. %s", quote.Value(e.Root), e.Err, quote.Value(bpf.DefaultBPFFS+"/xdp_drop"))
	case bpf.PinDirNotOurs:
		return fmt.Sprintf("pin_path: %v; it is not ours, so it is left alone: move it, or choose another pin_path", e.Err)
	}
	return fmt.Sprintf("pin_path: %v", e.Err)
}

// noteText is what the operator reads of a note Acquire reports
// (keepAttached: the option is set).
func noteText(n bpf.Note, keepAttached bool) string {
	switch n.Kind {
	case bpf.NoteUnpinned:
		lost := "counters restart at every restart"
		if keepAttached {
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

// explain turns a load or attach error into one that says what to do.
func (l *links) explain(name string, err error) error {
	var existing *bpf.ExistingProgramError
	var refused *bpf.NativeRefusedError
	var live *bpf.LiveOwnerError
	switch {
	case errors.As(err, &live) && len(live.Owners) == 0:
		return fmt.Errorf("interface %s: %w; an interface is never taken from a running xdp_drop, even with replace = true, so it is left alone: "+
			"run as root to see the owner, stop the other instance, or, if it is a link kept by a stopped one, remove that pin", quote.Value(name), err)
	case errors.As(err, &live):
		return fmt.Errorf("interface %s: %w; an interface is never taken from a running xdp_drop, even with replace = true, so it is left alone: "+
			"stop that instance, or give each instance interfaces and a pin_path of its own", quote.Value(name), err)
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("interface %s: %w; %s", quote.Value(name), err, fdAdvice(l.policy.FDs()))
	case errors.Is(err, bpf.ErrPermission):
		exe, _ := os.Executable()
		if exe == "" {
			exe = "telegraf-xdp-drop"
		}
		// The group and mode first: a binary with these capabilities that
		// anyone may run lets anyone drop any interface's traffic.
		return fmt.Errorf("interface %s: %w; run as root or grant them, letting only Telegraf's group run it: "+
			"chown root:telegraf %s && chmod 0750 %s && setcap cap_bpf,cap_net_admin,cap_perfmon+ep %s", quote.Value(name), err, exe, exe, exe)
	case errors.As(err, &refused) && refused.MTULimited():
		return fmt.Errorf(`interface %s: %w, or set mode = "generic" (or "auto", which falls back to it)`, quote.Value(name), err)
	case errors.Is(err, bpf.ErrNativeUnsupported):
		return fmt.Errorf(`interface %s: %w; set mode = "generic" or mode = "auto"`, quote.Value(name), err)
	case errors.As(err, &existing) && existing.Uninspectable:
		return fmt.Errorf("interface %s: %w: whose it is cannot be told (another xdp_drop instance's or another tool's), so it is left alone; "+
			"see it with: bpftool prog show id %d (as root), then stop or detach its owner, or set replace = true to replace it", quote.Value(name), err, existing.ID)
	case errors.As(err, &existing) && existing.Name == bpf.ProgramName:
		return fmt.Errorf("interface %s: %w: an xdp_drop program that another running instance owns, or one left pinned or attached by hand; "+
			"it is left alone: stop the other instance; if none runs, set replace = true to replace it", quote.Value(name), err)
	case errors.As(err, &existing):
		return fmt.Errorf("interface %s: %w; it is not ours, so it is left alone: set replace = true to replace it, or detach it first", quote.Value(name), err)
	case l.mode == bpf.ModeOffload:
		return fmt.Errorf(`interface %s: offload mode failed: %w; few NICs offload XDP with per-CPU maps: use mode = "native"`, quote.Value(name), err)
	}
	return fmt.Errorf("interface %s: %w", quote.Value(name), err)
}

// fdAdvice explains running out of file descriptors: the limit and what
// each interface needs (perInterface, with the rules' maps).
func fdAdvice(perInterface int) string {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Sprintf("out of file descriptors: each attached interface holds %d; raise RLIMIT_NOFILE (systemd: LimitNOFILE=)", perInterface)
	}
	return fmt.Sprintf("out of file descriptors: RLIMIT_NOFILE is %d (hard limit %d) and each attached interface holds %d; "+
		"raise the hard limit of the process that starts the binary (systemd: LimitNOFILE= in Telegraf's unit)",
		lim.Cur, lim.Max, perInterface)
}
