//go:build linux

package handover

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// A holder locks a file next to each socket it offers on before it binds
// the socket, and holds the lock for as long as it offers there: an open
// file description lock, which the kernel lets go when the holder dies,
// even by SIGKILL, and which no later process of the same pid inherits. A
// successor refused at a socket so tells a holder about to listen (the lock
// held) from a socket a dead holder left (the lock free, or no lock file).

// ErrHolderGone says that the holder that offered on a socket is gone: it
// died and left its socket, which no process listens on or holds.
var ErrHolderGone = errors.New("the handover process that offered it is gone (it died, leaving its socket): nothing to take over")

func lockPath(socket string) string { return socket + ".lock" }

// lockSocket takes the lock of the socket at path, for a holder about to
// offer on it; another holder that holds it offers there already.
func lockSocket(path string) (*os.File, error) {
	f, err := os.OpenFile(lockPath(path), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("offer on %s: %w", path, err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("offer on %s: another handover process already offers this interface", path)
		}
		return nil, fmt.Errorf("offer on %s: lock %s: %w", path, lockPath(path), err)
	}
	return f, nil
}

// unlockSocket lets the lock of the socket at path go, once the socket is
// closed, and removes its file.
func unlockSocket(path string, lock *os.File) {
	if lock == nil {
		return
	}
	os.Remove(lockPath(path))
	lock.Close()
}

// holderLives reports whether a holder holds the lock of the socket at
// path, that is lives and offers, or is about to offer, there.
func holderLives(path string) bool {
	f, err := os.OpenFile(lockPath(path), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false
	}
	return lk.Type != unix.F_UNLCK
}
