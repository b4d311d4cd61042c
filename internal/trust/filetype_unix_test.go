//go:build unix

package trust

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestFileType: the type FileType reads from a stat's mode is the one os
// reads, for every kind of file a test can make.
func TestFileType(t *testing.T) {
	dir := t.TempDir()
	file, link, fifo, sock := filepath.Join(dir, "f"), filepath.Join(dir, "l"), filepath.Join(dir, "p"), filepath.Join(dir, "s")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	require.NoError(t, os.Symlink(file, link))
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	for _, path := range []string{file, dir, link, fifo, sock, "/dev/null"} {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(path, &st))
		fi, err := os.Lstat(path)
		require.NoError(t, err)
		require.Equal(t, fi.Mode().Type(), FileType(uint32(st.Mode)), path)
	}
}
