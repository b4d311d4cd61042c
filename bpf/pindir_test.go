//go:build linux

package bpf_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// optionWords are the option and flag names only the plugin may word its
// advice in: bpf says facts.
var optionWords = regexp.MustCompile(`pin_path|keep_attached|replace = |mode = |sample_rate|handover_timeout|per_queue|dry_run, |-watch|-status`)

// TestAcquirePinErrors: a pin directory Acquire cannot use is a typed
// error or note that carries the facts (which root, why) and names no
// option: a root that is not a directory, an interface's directory that
// is not ours, a root on no BPF filesystem (attached without pins).
func TestAcquirePinErrors(t *testing.T) {
	ns := testns.New(t)
	dir := filepath.Join(testns.BPFFS(t, 0o700), "xdp_drop")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	pinMap := func(path string) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		require.NoError(t, err)
		defer m.Close()
		require.NoError(t, m.Pin(path))
	}
	notDir := filepath.Join(dir, "somemap")
	pinMap(notDir)
	pinMap(filepath.Join(dir, testns.Dev))

	acquire := func(pinPath string) (bpf.Got, error) {
		in := bpf.NewInstance(bpf.Policy{Protocols: []uint8{17}})
		t.Cleanup(func() { in.Close() })
		var got bpf.Got
		err := ns.Attach(testns.Dev, func() (err error) {
			got, err = in.Acquire(bpf.Want{Ifindex: ns.DevIdx, Name: testns.Dev, Mode: bpf.ModeNative, PinPath: pinPath, KeepAttached: true})
			return err
		})
		return got, err
	}
	for _, c := range []struct {
		root   string
		reason bpf.PinDirReason
	}{{notDir, bpf.PinRootNotDir}, {dir, bpf.PinDirNotOurs}} {
		_, err := acquire(c.root)
		var pinErr *bpf.PinDirError
		require.ErrorAs(t, err, &pinErr)
		require.Equal(t, c.root, pinErr.Root)
		require.Equal(t, c.reason, pinErr.Reason)
		require.ErrorContains(t, pinErr.Err, "is a pinned BPF map, not a directory")
		require.NotRegexp(t, optionWords, err.Error())
	}

	got, err := acquire(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { got.Program.Close() })
	require.NotEmpty(t, got.Notes)
	unpinned := got.Notes[0]
	require.Equal(t, bpf.NoteUnpinned, unpinned.Kind)
	var unpinnable *bpf.UnpinnableError
	require.ErrorAs(t, unpinned.Err, &unpinnable)
	require.Contains(t, unpinnable.Why, "is not on a BPF filesystem")
	require.Contains(t, unpinnable.Why, "mount -t bpf bpf ")
	for _, n := range got.Notes {
		require.NotRegexp(t, optionWords, n.Text)
	}
}

// TestCheckPinPathPlainDirectory: a pin path on no BPF filesystem (a plain
// directory) is, read without mounting or creating anything, the
// *UnpinnableError a start notes, naming the mount that fixes it.
func TestCheckPinPathPlainDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "xdp_drop")
	err := bpf.CheckPinPath(root)
	var unpinnable *bpf.UnpinnableError
	require.ErrorAs(t, err, &unpinnable)
	require.Equal(t, root+" is not on a BPF filesystem: use a path under /sys/fs/bpf, or as root mount one there: mkdir -p "+root+" && mount -t bpf bpf "+root, unpinnable.Why)
	require.NotRegexp(t, optionWords, err.Error())
	_, err = os.Stat(root)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing created")
}

// TestCheckPinPath: on a BPF filesystem PID 1 sees, a pin path is usable
// (missing or a directory); an object pinned where the root would be is
// the *PinDirError a start refuses with.
func TestCheckPinPath(t *testing.T) {
	fs := testns.BPFFS(t, 0o700)
	require.NoError(t, bpf.CheckPinPath(filepath.Join(fs, "xdp_drop")))
	require.NoError(t, os.Mkdir(filepath.Join(fs, "xdp_drop"), 0o700))
	require.NoError(t, bpf.CheckPinPath(filepath.Join(fs, "xdp_drop")))

	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(t, err)
	defer m.Close()
	pinned := filepath.Join(fs, "somemap")
	require.NoError(t, m.Pin(pinned))
	var pinErr *bpf.PinDirError
	require.ErrorAs(t, bpf.CheckPinPath(pinned), &pinErr)
	require.Equal(t, bpf.PinRootNotDir, pinErr.Reason)
	require.ErrorContains(t, pinErr, "is a pinned BPF map, not a directory")
}
