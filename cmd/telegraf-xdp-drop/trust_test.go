//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testns"
)

// TestConfigTrust: a config that someone other than root and the running
// user could change, directly or through a directory above it, is refused
// with the command that fixes it; a sticky directory such as /tmp is fine.
func TestConfigTrust(t *testing.T) {
	testns.RequirePrivileged(t) // chown to another user
	me := os.Getuid()
	dir := t.TempDir()
	conf := filepath.Join(dir, "xdp_drop.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[[inputs.xdp_drop]]\n"), 0o644))
	require.NoError(t, checkConfigTrust(conf, me))

	require.NoError(t, os.Chmod(conf, 0o664))
	err := checkConfigTrust(conf, me)
	require.ErrorContains(t, err, conf+" is writable by its group (mode 0664)")
	require.ErrorContains(t, err, "chmod go-w "+conf)
	require.NoError(t, os.Chmod(conf, 0o646))
	require.ErrorContains(t, checkConfigTrust(conf, me), "writable by all users")
	require.NoError(t, os.Chmod(conf, 0o644))

	require.NoError(t, os.Chown(conf, 4242, 4242))
	err = checkConfigTrust(conf, me)
	require.ErrorContains(t, err, conf+" is owned by uid 4242")
	require.ErrorContains(t, err, "chown root "+conf)
	require.NoError(t, checkConfigTrust(conf, 4242), "the running user may own it")
	require.NoError(t, os.Chown(conf, 0, 0))

	link := filepath.Join(dir, "link.conf")
	require.NoError(t, os.Symlink(conf, link))
	require.NoError(t, checkConfigTrust(link, me))

	// A link in a directory others may write: they could point it elsewhere.
	open := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chown(open, 4242, 4242))
	shared := filepath.Join(open, "xdp_drop.conf")
	require.NoError(t, os.Symlink(conf, shared))
	err = checkConfigTrust(shared, me)
	require.ErrorContains(t, err, open+" is owned by uid 4242")
	require.ErrorContains(t, err, "(it holds the symbolic link "+shared+")")
	require.NoError(t, os.Chown(open, 0, 0))
	require.NoError(t, checkConfigTrust(shared, me))
	require.NoError(t, os.Lchown(shared, 4242, 4242))
	require.ErrorContains(t, checkConfigTrust(shared, me), shared+" is a symbolic link owned by uid 4242")
	// ... and a link to that link.
	require.NoError(t, os.Lchown(shared, 0, 0))
	require.NoError(t, os.Chmod(open, 0o777))
	relay := filepath.Join(dir, "relay.conf")
	require.NoError(t, os.Symlink(shared, relay))
	err = checkConfigTrust(relay, me)
	require.ErrorContains(t, err, open+" is writable by its group and all users (mode 0777)")
	require.ErrorContains(t, err, "(it holds the symbolic link "+shared+")")

	require.NoError(t, os.Chmod(dir, 0o777))
	require.ErrorContains(t, checkConfigTrust(conf, me), dir+" is writable by its group and all users (mode 0777)")
	require.NoError(t, os.Chmod(dir, 0o777|os.ModeSticky))
	require.NoError(t, checkConfigTrust(conf, me), "a sticky directory lets no one replace the file")
}
