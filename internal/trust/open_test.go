//go:build unix

package trust

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOpenRegular: without the check, a regular file is opened with what
// it is; a FIFO is refused at once, not waited on, and a directory is
// refused too, each as a *NotRegularError naming its type.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	file, fifo := filepath.Join(dir, "list.txt"), filepath.Join(dir, "fifo")
	require.NoError(t, os.WriteFile(file, []byte("192.0.2.0/24\n"), 0o600))
	require.NoError(t, unix.Mkfifo(fifo, 0o600))

	f, fi, err := OpenRegular(file, NoCheck, "prefix file")
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, int64(13), fi.Size())
	raw, err := io.ReadAll(f)
	require.NoError(t, err)
	require.Equal(t, "192.0.2.0/24\n", string(raw))

	for path, mode := range map[string]fs.FileMode{fifo: fs.ModeNamedPipe, dir: fs.ModeDir} {
		f, _, err := OpenRegular(path, NoCheck, "prefix file")
		require.Nil(t, f)
		var notRegular *NotRegularError
		require.ErrorAs(t, err, &notRegular)
		require.Equal(t, &NotRegularError{Path: path, Mode: mode}, notRegular)
	}
}
