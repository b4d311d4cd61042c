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

// CheckPath says what is wrong with path as a capture file for this
// process, nil when nothing is: it must be absolute, in an existing
// directory this process may write and no other user may (unless sticky),
// and be absent or a regular file of this user's, not a symbolic link.
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
	if err := checkDirMode(dir, fi); err != nil {
		return err
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
	return checkExisting(lfi.Mode(), lfi.Sys().(*syscall.Stat_t).Uid)
}

// checkDirMode refuses a directory other users may write without the
// sticky bit: they could swap the capture for a link to another file.
func checkDirMode(dir string, fi fs.FileInfo) error {
	if fi.Mode().Perm()&0o022 == 0 || fi.Mode()&fs.ModeSticky != 0 {
		return nil
	}
	return fmt.Errorf("is in %s, which group or other users may write (mode %04o), who could swap the file for a link to another; run chmod go-w %s, or choose a directory of the service user's own", dir, fi.Mode().Perm(), dir)
}

// checkExisting says what is wrong with a file found at the capture path.
func checkExisting(mode fs.FileMode, owner uint32) error {
	if mode&fs.ModeSymlink != 0 {
		return errors.New("is a symbolic link, which the capture is never written through; remove it or name the file itself")
	}
	if !mode.IsRegular() {
		return fmt.Errorf("is not a regular file but %s; choose a path for a file", trust.FileKind(mode))
	}
	if int(owner) != os.Geteuid() {
		return fmt.Errorf("is a file owned by uid %d, not this user (uid %d); remove it or choose another path", owner, os.Geteuid())
	}
	return nil
}

// openDir opens the capture's directory, once, and checks it.
func openDir(path string) (*os.File, string, error) {
	dirName, name := filepath.Dir(path), filepath.Base(path)
	dir, err := os.OpenFile(dirName, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open capture directory: %w", err)
	}
	fi, err := dir.Stat()
	if err == nil {
		err = checkDirMode(dirName, fi)
	}
	if err != nil {
		dir.Close()
		return nil, "", fmt.Errorf("capture file %s %w", path, err)
	}
	return dir, name, nil
}

// stat describes what is at name in the capture's directory, a link not followed.
func (w *Writer) stat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(w.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &fs.PathError{Op: "stat", Path: w.path, Err: err}
	}
	return st, nil
}

// fileMode is the type of a file as fs names it.
func fileMode(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeSocket
}

// start moves a capture found at the path to <path>.1 (an empty one is
// removed) and creates the file.
func (w *Writer) start() error {
	st, err := w.stat(w.name)
	if errors.Is(err, fs.ErrNotExist) {
		return w.open()
	}
	if err == nil {
		err = checkExisting(fileMode(st.Mode), st.Uid)
	}
	if err == nil && st.Size > 0 {
		err = unix.Renameat(int(w.dir.Fd()), w.name, int(w.dir.Fd()), w.name+".1")
	} else if err == nil {
		err = unix.Unlinkat(int(w.dir.Fd()), w.name, 0)
	}
	if err != nil {
		return fmt.Errorf("capture file %s %w", w.path, err)
	}
	return w.open()
}

// createFile creates the capture file: new, so never another's file nor
// through a link put in its place, mode 0600 from the start. Non-blocking,
// so that a FIFO put there cannot hang us.
func (w *Writer) createFile() (*os.File, error) {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(int(w.dir.Fd()), w.name, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("%s appeared since it was moved away, put there by someone else; it is left alone", w.path)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: w.path, Err: err}
	}
	return os.NewFile(uintptr(fd), w.path), nil
}

// moveCurrent renames the file being written to <path>.1, if what is at
// the path is still that file.
func (w *Writer) moveCurrent() error {
	var mine unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &mine); err != nil {
		return err
	}
	there, err := w.stat(w.name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if there.Dev != mine.Dev || there.Ino != mine.Ino {
		return fmt.Errorf("%s was replaced since it was created, by someone else; it is left alone: remove it", w.path)
	}
	return unix.Renameat(int(w.dir.Fd()), w.name, int(w.dir.Fd()), w.name+".1")
}
