//go:build unix

package pcapng

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// CheckPath says what is wrong with path as a capture file for this
// process, nil when nothing is: it must be absolute, in an existing
// directory this process may write and no other user may, sticky or not
// (one could create the capture's files there first and so stop it). What
// is at the path itself is for Open to find: it may change at any time.
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
	if err := checkDirPrivate(dir, fi); err != nil {
		return err
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("is in %s, where this user (uid %d) may not create files: %v; give the service user a directory of its own", dir, os.Geteuid(), err)
	}
	return nil
}

// checkDirPrivate refuses a directory a user other than root and this
// one may write: the owner, or anyone through group or other write.
func checkDirPrivate(dir string, fi fs.FileInfo) error {
	const fix = "choose a directory only the service user may write, such as /var/lib/telegraf/xdp_drop (owned by it, mode 0700)"
	st := fi.Sys().(*syscall.Stat_t)
	if mode := st.Mode & 0o7777; mode&0o022 != 0 {
		return fmt.Errorf("is in %s, which other users may write (mode %04o): one could create the capture's files there first and stop it; %s", dir, mode, fix)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("is in %s, owned by %s, who may create the capture's files there first and stop it; %s", dir, trust.UserName(st.Uid), fix)
	}
	return nil
}

// checkDirMode refuses a directory other users may write without the
// sticky bit: they could swap the capture for a link to another file. (The
// writer is safe in a sticky one: it never follows a link nor opens a file
// of another user's; CheckPath refuses it still, for a capture that works.)
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
		return st, &fs.PathError{Op: "stat", Path: w.full(name), Err: err}
	}
	return st, nil
}

// resume continues the capture at the path, cut back to its last whole
// block, or creates it; a file there that is not a pcapng one is rotated.
func (w *Writer) resume() error {
	f, err := w.openExisting()
	if errors.Is(err, fs.ErrNotExist) {
		return w.create()
	}
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("capture file %s: %w", w.path, err)
	}
	sec, ok, err := readCapture(f, fi.Size(), w.opts.Snaplen)
	if err != nil {
		f.Close()
		return fmt.Errorf("read capture file %s: %w", w.path, err)
	}
	w.continueAt(f, sec)
	if !ok {
		if err := w.rotate(); err != nil {
			// Never written over: it is not a capture.
			w.f.Close()
			w.f = nil
			return err
		}
		return nil
	}
	if sec.end < fi.Size() {
		w.cut = true
		return w.cutBack()
	}
	return nil
}

// openExisting opens and locks the file at the path, if it is a regular
// file of this user's; fs.ErrNotExist when there is none.
func (w *Writer) openExisting() (*os.File, error) {
	if err := w.ours(w.name); err != nil {
		return nil, err
	}
	const flags = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(int(w.dir.Fd()), w.name, flags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: w.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), w.path)
	if err := w.lock(f); err != nil {
		f.Close()
		return nil, err
	}
	// Locked: it must still be the file at the path, and one of ours.
	var mine unix.Stat_t
	err = unix.Fstat(fd, &mine)
	if err == nil {
		err = checkExisting(trust.FileType(uint32(mine.Mode)), mine.Uid)
	}
	if err == nil {
		err = w.same(&mine)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture file %s %w", w.path, err)
	}
	return f, nil
}

// lock takes the file for this writer alone: another process writing the
// same capture (one still stopping, or another instance) keeps it.
func (w *Writer) lock(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("capture file %s is being written by another process; it is left to it", w.path)
	}
	if err != nil {
		return fmt.Errorf("lock capture file %s: %w", w.path, err)
	}
	return nil
}

// same says whether what is at the path is the file described by mine.
func (w *Writer) same(mine *unix.Stat_t) error {
	there, err := w.stat(w.name)
	if err != nil {
		return err
	}
	if there.Dev != mine.Dev || there.Ino != mine.Ino {
		return errors.New("was replaced since it was opened, by someone else; it is left alone: remove it")
	}
	return nil
}

// create creates the capture file, new and locked, as the current file.
func (w *Writer) create() error {
	f, err := w.createFile()
	if err != nil {
		return fmt.Errorf("create capture file: %w", err)
	}
	if err := w.lock(f); err != nil {
		f.Close()
		return err
	}
	w.continueAt(f, section{})
	return nil
}

// createFile creates the capture file: new, so never another's file nor
// through a link put in its place, mode 0600 from the start. Non-blocking,
// so that a FIFO put there cannot hang us.
func (w *Writer) createFile() (*os.File, error) {
	const flags = unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(int(w.dir.Fd()), w.name, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("%s appeared since it was moved away, put there by someone else; it is left alone: remove it", w.path)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: w.path, Err: err}
	}
	return os.NewFile(uintptr(fd), w.path), nil
}

// rotated is the name of the n-th rotated file.
func (w *Writer) rotated(n int) string { return w.name + "." + strconv.Itoa(n) }

// moveFiles makes room at <path>.1, moving the rotated files up by one as
// far as the first one missing (so a rotation tried again after a failure
// moves none twice), the last kept replacing the oldest; then moves the
// current file there, if what is at the path is still that file.
func (w *Writer) moveFiles() error {
	last := w.opts.Files
	for n := 1; n < w.opts.Files; n++ {
		_, err := w.stat(w.rotated(n))
		if errors.Is(err, fs.ErrNotExist) {
			last = n
			break
		}
		if err != nil {
			return err
		}
	}
	for n := last - 1; n >= 1; n-- {
		if err := w.move(w.rotated(n), w.rotated(n+1)); err != nil {
			return err
		}
	}
	var mine unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &mine); err != nil {
		return err
	}
	err := w.same(&mine)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed: there is nothing to keep
	}
	if err != nil {
		return fmt.Errorf("%s %w", w.path, err)
	}
	return w.move(w.name, w.rotated(1))
}

// move renames a file of this user's in the directory onto another name,
// where there is nothing or another file of this user's.
func (w *Writer) move(from, to string) error {
	if err := w.ours(from); err != nil {
		return err
	}
	if err := w.ours(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := unix.Renameat(int(w.dir.Fd()), from, int(w.dir.Fd()), to); err != nil {
		return fmt.Errorf("rename %s to %s: %w", w.full(from), w.full(to), err)
	}
	return nil
}

// ours says what is wrong with the file at name in the directory as one
// this writer may continue, move or replace; fs.ErrNotExist when absent.
func (w *Writer) ours(name string) error {
	st, err := w.stat(name)
	if err != nil {
		return err
	}
	if err := checkExisting(trust.FileType(uint32(st.Mode)), st.Uid); err != nil {
		return fmt.Errorf("%s %w", w.full(name), err)
	}
	return nil
}

// full is the path of name in the capture's directory.
func (w *Writer) full(name string) string { return filepath.Join(filepath.Dir(w.path), name) }
