//go:build linux

package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks is the kernel's limit on symbolic links followed in one lookup.
const maxLinks = 40

// Open opens a file (what names it in errors: "config", "prefix file")
// for a process whose capabilities make whoever writes it the one who
// decides which traffic is dropped. It refuses the file unless only root and uid (the real user
// running the binary) could have chosen its contents: every directory
// entered on the way, from /, is owned by one of them and writable by no
// one else unless sticky (as /tmp); every symbolic link met is owned by
// one of them (its directory was entered, so checked); and the file is too.
// The path is resolved here, one component at a time, each opened relative
// to the directory opened before it without following links, and the file
// is opened relative to its directory and checked through that descriptor:
// nothing on the way can be swapped between its check and its use, and the
// caller reads from the descriptor that was checked.
func Open(path string, uid int, what string) (*os.File, error) {
	if !strings.HasPrefix(path, "/") {
		wd, err := unix.Getwd()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		path = wd + "/" + path
	}
	w := &walk{uid: uid, what: what}
	defer w.close()
	return w.open(path)
}

// walk is one resolution of a path: the directories from / to the current
// one, each open (O_PATH) and checked.
type walk struct {
	uid   int
	what  string // the file's role, for messages
	dirs  []dirFD
	links int    // symbolic links followed
	via   string // the last symbolic link followed, for messages
}

type dirFD struct {
	fd   int
	name string // its resolved path
}

func (w *walk) open(path string) (*os.File, error) {
	if err := w.toRoot(); err != nil {
		return nil, err
	}
	rest := components(path)
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			w.up()
			continue
		}
		dir := w.dirs[len(w.dirs)-1]
		full := join(dir.name, name)
		fd, err := unix.Openat(dir.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "open", Path: full, Err: err})
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "stat", Path: full, Err: err})
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			w.dirs = append(w.dirs, dirFD{fd, full})
			if err := w.check(full, &st); err != nil {
				return nil, err
			}
		case unix.S_IFLNK:
			target, err := w.readLink(fd, full)
			unix.Close(fd)
			if err != nil {
				return nil, err
			}
			if err := w.checkLink(full, &st); err != nil {
				return nil, err
			}
			if strings.HasPrefix(target, "/") {
				if err := w.toRoot(); err != nil {
					return nil, err
				}
			}
			rest = append(components(target), rest...)
		default:
			unix.Close(fd)
			if len(rest) > 0 {
				return nil, fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "open", Path: full, Err: unix.ENOTDIR})
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return nil, &NotRegularError{Path: full, Mode: FileType(st.Mode)}
			}
			f, err := w.openFile(dir.fd, name, full)
			if errors.Is(err, unix.ELOOP) {
				// Replaced by a link since it was looked at: look again.
				rest = []string{name}
				if err := w.countLink(full); err != nil {
					return nil, err
				}
				continue
			}
			return f, err
		}
	}
	last := w.dirs[len(w.dirs)-1].name
	return nil, &NotRegularError{Path: last, Mode: fs.ModeDir}
}

// openFile opens the file itself, relative to its directory, and checks
// the descriptor it will be read from.
func (w *walk) openFile(dirfd int, name, full string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "open", Path: full, Err: err})
	}
	f := os.NewFile(uintptr(fd), full)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "stat", Path: full, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, &NotRegularError{Path: full, Mode: FileType(st.Mode)}
	}
	if err := w.check(full, &st); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// check refuses a directory or file that a user other than root and uid
// owns or may write (a sticky directory lets others add entries, not
// replace ours).
func (w *walk) check(name string, st *unix.Stat_t) error {
	if st.Uid != 0 && int(st.Uid) != w.uid {
		return w.refuse("%s is owned by %s, who could then choose which traffic is dropped; "+
			"make it root's: chown root %s (or run as that user)", name, UserName(st.Uid), name)
	}
	perm := fs.FileMode(st.Mode & 0o777)
	writable := perm & 0o022
	if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0 {
		writable = 0
	}
	if writable != 0 {
		return w.refuse("%s is writable by %s (mode %04o), who could then choose which traffic is dropped; "+
			"run: chmod go-w %s", name, writers(writable), perm, name)
	}
	return nil
}

// checkLink refuses a symbolic link owned by a user other than root and
// uid: its owner may point it elsewhere at any time.
func (w *walk) checkLink(name string, st *unix.Stat_t) error {
	if st.Uid != 0 && int(st.Uid) != w.uid {
		return w.refuse("%s is a symbolic link owned by %s, who could then choose which file is read as the %s; "+
			"pass the file's own path, or make the link root's: chown -h root %s", name, UserName(st.Uid), w.what, name)
	}
	if err := w.countLink(name); err != nil {
		return err
	}
	w.via = name
	return nil
}

func (w *walk) countLink(name string) error {
	w.links++
	if w.links > maxLinks {
		return fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "open", Path: name, Err: unix.ELOOP})
	}
	return nil
}

func (w *walk) refuse(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if w.via != "" {
		msg += fmt.Sprintf(" (reached through the symbolic link %s)", w.via)
	}
	return &UntrustedError{msg}
}

// toRoot starts again from /, as an absolute link target does.
func (w *walk) toRoot() error {
	w.close()
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: open /: %w", w.what, err)
	}
	w.dirs = append(w.dirs, dirFD{fd, "/"})
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: stat /: %w", w.what, err)
	}
	return w.check("/", &st)
}

// up steps to the parent of the current directory as it was reached; / is
// its own parent.
func (w *walk) up() {
	if n := len(w.dirs); n > 1 {
		unix.Close(w.dirs[n-1].fd)
		w.dirs = w.dirs[:n-1]
	}
}

func (w *walk) close() {
	for _, d := range w.dirs {
		unix.Close(d.fd)
	}
	w.dirs = w.dirs[:0]
}

// readLink reads the target of the symbolic link open (O_PATH) as fd.
func (w *walk) readLink(fd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", fmt.Errorf("%s: %w", w.what, &fs.PathError{Op: "readlink", Path: name, Err: err})
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// components splits a path into its names, leaving out empty ones and ".".
func components(path string) []string {
	var names []string
	for _, n := range strings.Split(path, "/") {
		if n != "" && n != "." {
			names = append(names, n)
		}
	}
	return names
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// HasCapability reports whether the process holds capability c, effective.
func HasCapability(c uint) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}
