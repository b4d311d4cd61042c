//go:build unix

package pcapng

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// openFlags opens a FIFO put in place since the check without waiting for
// a reader.
const openFlags = unix.O_NONBLOCK | unix.O_CLOEXEC

// CheckPath says what is wrong with path as a capture file for this
// process, nil when nothing is: it must be absolute, in an existing
// directory this process may write, and be absent or a regular file (a
// symbolic link only when root or this user owns it).
func CheckPath(path string) error {
	if !filepath.IsAbs(path) {
		return errors.New("is not an absolute path")
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("is in %s, which does not exist: create it (owned by the service user, mode 0700)", dir)
	case err != nil:
		return fmt.Errorf("its directory cannot be read: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("is in %s, which is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("is in %s, where this user (uid %d) may not create files: %v; give the service user a directory of its own", dir, os.Geteuid(), err)
	}
	lfi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot be read: %w", err)
	}
	if lfi.Mode()&fs.ModeSymlink != 0 {
		if owner := lfi.Sys().(*syscall.Stat_t).Uid; owner != 0 && int(owner) != os.Geteuid() {
			return fmt.Errorf("is a symbolic link owned by uid %d, neither root nor this user (uid %d), who could point it anywhere; remove it or choose another path", owner, os.Geteuid())
		}
		if lfi, err = os.Stat(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cannot be read: %w", err)
		}
		if err != nil {
			return nil
		}
	}
	if !lfi.Mode().IsRegular() {
		return fmt.Errorf("is not a regular file but %s; choose a path for a file", trust.FileKind(lfi.Mode()))
	}
	return nil
}
