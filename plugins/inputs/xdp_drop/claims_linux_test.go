//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestLinkModeWhileNotAttached: the mode tag of an interface that is not
// attached is the configured mode (native when unset), as the plugin's README says.
func TestLinkModeWhileNotAttached(t *testing.T) {
	ns := testns.New(t)
	for _, mode := range []string{"", "native", "generic", "auto"} {
		p := withDefaults(&XDPDrop{Interfaces: []string{"xdpt9"}, Mode: mode, Drop: []any{"all"}, Log: testutil.Logger{}})
		startPlugin(t, ns, p)
		acc := &testutil.Accumulator{}
		inNS(t, ns, p, func() error { return p.Gather(acc) })
		m, ok := acc.Get("xdp_drop_link")
		require.True(t, ok)
		want := mode
		if want == "" {
			want = "native"
		}
		require.Equal(t, map[string]string{"interface": "xdpt9", "mode": want}, m.Tags, "mode = %q", mode)
		require.Equal(t, false, m.Fields["attached"])
	}
}

// TestLoopbackOnlyByName: a pattern never selects loopback, but naming it
// exactly does. Loopback has no native XDP, so in native mode the plugin
// tries, fails with its advice and reports lo, attaching nothing.
func TestLoopbackOnlyByName(t *testing.T) {
	ns := testns.New(t)
	p := withDefaults(&XDPDrop{Interfaces: []string{"lo"}, Drop: []any{"all"}, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	// inNS refuses lo even in the test namespace; native mode cannot attach it.
	require.NoError(t, ns.Do(func() error {
		if err := testns.CheckNotInitial(); err != nil {
			return err
		}
		if err := p.Start(acc); err != nil {
			return err
		}
		return p.Gather(acc)
	}))
	t.Cleanup(func() { ns.Do(func() error { p.Stop(); return nil }) })
	require.NotEmpty(t, acc.Errors)
	require.Contains(t, acc.Errors[0].Error(), `interface "lo"`)
	require.Contains(t, acc.Errors[0].Error(), `mode = "generic"`)
	f := linkPoint(t, acc, "lo")
	require.Equal(t, false, f["attached"])
	id, err := ns.XDPProgramID("lo")
	require.NoError(t, err)
	require.Zero(t, id)
}

// TestPinPathPrivateMountsNotMounted: when nothing is mounted on
// /sys/fs/bpf in a mount namespace other than PID 1's, a BPF filesystem
// mounted there would vanish with the process: a pin_path under it is
// refused, naming the reason, nothing is mounted and nothing attaches.
// The test runs on a thread in a mount namespace of its own that dies with
// it, so the machine's /sys/fs/bpf is never touched.
func TestPinPathPrivateMountsNotMounted(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	log := &captureLog{}
	dir := bpf.DefaultBPFFS + "/xdpdrop-test-mount"
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, PinPath: dir, Log: log})
	require.NoError(t, p.Init())
	acc := &testutil.Accumulator{}
	require.NoError(t, inPrivateMounts(ns, func() error {
		if onBPFFS(bpf.DefaultBPFFS) {
			return errors.New("the BPF filesystem is still mounted in the private mount namespace")
		}
		if err := p.Start(acc); err != nil {
			return err
		}
		if onBPFFS(bpf.DefaultBPFFS) {
			return fmt.Errorf("a BPF filesystem was mounted on %s by Start", bpf.DefaultBPFFS)
		}
		return nil
	}))
	t.Cleanup(func() { p.Stop() })
	require.NotContains(t, strings.Join(log.infos, "\n"), "mounted the BPF filesystem")
	require.Len(t, acc.Errors, 1)
	require.ErrorIs(t, acc.Errors[0], bpf.ErrPrivateBPFFS)
	require.Nil(t, p.links.ifaces[0].prog, "nothing attached on a private BPF filesystem")
	require.False(t, dirExists(dir), "the machine's own /sys/fs/bpf holds no %s", dir)
}

func onBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

func dirExists(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil
}

// inPrivateMounts runs f on a thread in the test's network namespace and in
// a mount namespace of its own without the BPF filesystem. The thread is
// never unlocked, so it ends with f and takes its namespaces along.
func inPrivateMounts(ns *testns.NS, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare the mount namespace: %w", err)
			}
			// Private first, so that the unmount below stays in this namespace.
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			for onBPFFS(bpf.DefaultBPFFS) {
				if err := unix.Unmount(bpf.DefaultBPFFS, unix.MNT_DETACH); err != nil {
					return fmt.Errorf("unmount %s in the private mount namespace: %w", bpf.DefaultBPFFS, err)
				}
			}
			h, err := netns.GetFromPath(ns.Path)
			if err != nil {
				return err
			}
			defer h.Close()
			if err := netns.Set(h); err != nil {
				return err
			}
			if err := ns.CheckAttachable(testns.Dev); err != nil {
				return err
			}
			return f()
		}()
	}()
	return <-done
}
