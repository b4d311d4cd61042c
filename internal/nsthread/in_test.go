//go:build linux

package nsthread_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

func threadNS(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat("/proc/thread-self/ns/net", &st))
	return st.Ino
}

// TestIn: f runs in the namespace named, by name or path, and where it is
// for ""; a namespace that does not exist is an error naming it, and f
// does not run.
func TestIn(t *testing.T) {
	ns := testns.New(t)
	var want unix.Stat_t
	require.NoError(t, unix.Stat(ns.Path, &want))
	for _, name := range []string{ns.Name, ns.Path} {
		var got uint64
		require.NoError(t, nsthread.In(name, func() error { got = threadNS(t); return nil }))
		require.Equal(t, want.Ino, got, name)
	}
	// From a thread already in it: run there.
	require.NoError(t, ns.Do(func() error {
		return nsthread.In(ns.Name, func() error {
			require.Equal(t, want.Ino, threadNS(t))
			return nil
		})
	}))
	ran := false
	err := nsthread.In("xdpdrop-no-such-namespace", func() error { ran = true; return nil })
	require.ErrorContains(t, err, `network namespace "xdpdrop-no-such-namespace"`)
	require.False(t, ran)
	boom := errors.New("boom")
	require.ErrorIs(t, nsthread.In("", func() error { return boom }), boom)
}
