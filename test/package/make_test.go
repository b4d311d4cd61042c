//go:build package && linux

package packagetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// make runs make in the repository with a PATH that has no go, as under
// sudo, and returns its output and error.
func makeNoGo(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-C", "../.."}, args...)...)
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMakeInstall: make install installs what make build made, without
// building (sudo's PATH has no go), root:GROUP 0750 with the capabilities,
// and refuses clearly when the binary or the group is missing.
func TestMakeInstall(t *testing.T) {
	testns.RequirePrivileged(t)
	bin := filepath.Join(t.TempDir(), "telegraf-xdp-drop")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	dest := t.TempDir()
	out, err := makeNoGo(t, "install", "BIN="+bin, "DESTDIR="+dest, "GROUP=nogroup")
	require.NoError(t, err, out)
	require.NotContains(t, out, "go build")
	installed := filepath.Join(dest, "usr/local/bin/telegraf-xdp-drop")
	fi, err := os.Stat(installed)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o750), fi.Mode().Perm())
	st := fi.Sys().(*syscall.Stat_t)
	require.Equal(t, uint32(0), st.Uid)
	require.Equal(t, gid(t, "nogroup"), st.Gid)
	require.Equal(t, installed+" "+caps+"\n", run(t, "getcap", installed))

	out, err = makeNoGo(t, "install", "BIN="+bin+".missing", "DESTDIR="+dest)
	require.Error(t, err)
	require.Contains(t, out, bin+".missing is missing: run 'make build' first (as yourself; sudo's PATH has no go)")
	out, err = makeNoGo(t, "install", "BIN="+bin, "DESTDIR="+dest, "GROUP=xdpdrop-no-such-group")
	require.Error(t, err)
	require.Contains(t, out, "group xdpdrop-no-such-group does not exist")
}

// TestMakeHelp: every target is listed, digits included, with variables
// expanded.
func TestMakeHelp(t *testing.T) {
	out, err := makeNoGo(t, "help", "GO=true")
	require.NoError(t, err, out)
	mk, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	for _, line := range strings.Split(string(mk), "\n") {
		target, _, ok := strings.Cut(line, ":")
		if !ok || !strings.Contains(line, "## ") || strings.ContainsAny(target, " \t$") {
			continue
		}
		require.Contains(t, out, "  "+target+" ", "make help lists %s", target)
	}
	require.Contains(t, out, "  e2e ")
	require.Contains(t, out, "with clang-19 and")
	require.NotContains(t, out, "$(")
}
