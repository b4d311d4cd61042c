//go:build linux

package nsthread_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestDo: f runs inside the namespace enter moved the thread to, and the
// thread is back in its own namespace afterwards; when enter fails, f does
// not run and enter's error is returned.
func TestDo(t *testing.T) {
	ns := testns.New(t)
	target, err := netns.GetFromPath(ns.Path)
	require.NoError(t, err)
	defer target.Close()

	var inside, back bool
	err = nsthread.Do(func() error { return netns.Set(target) }, func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		inside = cur.Equal(target)
		return nil
	})
	require.NoError(t, err)
	require.True(t, inside, "f ran outside the namespace")

	// A Do that enters nothing runs where its thread already is: on a
	// thread of the pool, none of which was left in the namespace.
	back = true
	for range 100 {
		require.NoError(t, nsthread.Do(func() error { return nil }, func() error {
			cur, err := netns.Get()
			if err != nil {
				return err
			}
			defer cur.Close()
			back = back && !cur.Equal(target)
			return nil
		}))
	}
	require.True(t, back, "a thread was left in the namespace")

	refused := errors.New("refused")
	ran := false
	err = nsthread.Do(func() error { return refused }, func() error { ran = true; return nil })
	require.ErrorIs(t, err, refused)
	require.False(t, ran)
}
