// Package trust opens a file that decides what a process with raised
// capabilities does (the config, a prefix file) only when no user but root
// and the one running it could have chosen its contents.
package trust

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// UntrustedError is a refusal by the trust check (see Open), as opposed
// to a failure to read the file.
type UntrustedError struct{ msg string }

func (e *UntrustedError) Error() string { return e.msg }

// NotRegularError says the path names something other than a regular file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode // its type bits
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s)", e.Path, FileKind(e.Mode))
}

// FileKind names the type of a file that is not a regular one.
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

func writers(bits fs.FileMode) string {
	switch {
	case bits&0o020 != 0 && bits&0o002 != 0:
		return "its group and all users"
	case bits&0o020 != 0:
		return "its group"
	default:
		return "all users"
	}
}

// UserName names a user by uid, and by name when it has one.
func UserName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return fmt.Sprintf("uid %s (%s)", id, u.Username)
	}
	return "uid " + id
}

// NoCheck, as OpenRegular's uid, opens without the trust check: root could
// attach anything anyway, and a process without raised capabilities none.
const NoCheck = -1

// OpenRegular opens a regular file to read through one descriptor, under
// Open's check for uid unless uid is NoCheck, without blocking (a FIFO is
// refused, not waited on), and says what it is. Any other type of file is
// a *NotRegularError.
func OpenRegular(path string, uid int, what string) (*os.File, fs.FileInfo, error) {
	var f *os.File
	var err error
	if uid == NoCheck {
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	} else {
		f, err = Open(path, uid, what)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Mode: fi.Mode().Type()}
	}
	return f, fi, nil
}
