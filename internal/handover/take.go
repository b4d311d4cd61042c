//go:build linux

package handover

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Taken is an attachment a holder handed over. The successor must answer
// with Accept, once it owns the attachment, or Refuse.
type Taken struct {
	Offer
	c    *net.UnixConn
	wait time.Duration
}

// StuckError says that the holder offering an interface did not answer: it
// is stopped (SIGSTOP) or too slow. What it holds stays attached.
type StuckError struct {
	PID     int           // the holder's process id, 0 when not visible here
	Stopped bool          // found stopped: not waited for
	Wait    time.Duration // how long it was waited for, when not stopped
}

func (e *StuckError) Error() string {
	who := "the handover process"
	if e.PID > 0 {
		who = fmt.Sprintf("handover process %d", e.PID)
	}
	if e.Stopped {
		return who + ", which holds it for a stopped instance, is stopped (SIGSTOP)"
	}
	return fmt.Sprintf("%s, which holds it for a stopped instance, did not answer within %s", who, e.Wait.Round(time.Millisecond))
}

// Offered reports whether a holder offers the interface k.
func Offered(dir string, k Key) bool {
	_, err := os.Stat(socketPath(dir, k))
	return err == nil
}

// Take asks the holder that offers interface k, if any, for its
// attachment; manages lists every interface the caller manages, so that
// the holder can release the ones it does not. It returns nil when nothing
// is offered. A holder is waited for at most wait, and not at all when it
// is stopped: then the error is a *StuckError.
func Take(dir string, k Key, manages []Key, wait time.Duration) (*Taken, error) {
	o, c, err := request(dir, k, manages, wait)
	if o == nil || err != nil {
		return nil, err
	}
	return &Taken{Offer: *o, c: c, wait: wait}, nil
}

// TakeShared asks the holder for the shared offer (SharedKey), as Take
// does for an interface's; it returns nil when nothing is offered. The
// holder keeps its copies until it releases the last interface, so no
// answer is due: the descriptors are the caller's to keep or close.
func TakeShared(dir string, wait time.Duration) (*Offer, error) {
	o, c, err := request(dir, SharedKey, nil, wait)
	if c != nil {
		c.Close()
	}
	return o, err
}

// request asks the holder offering k for its offer; the connection is
// returned open with the offer, for the answer.
func request(dir string, k Key, manages []Key, wait time.Duration) (*Offer, *net.UnixConn, error) {
	path := socketPath(dir, k)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err := checkDirs(dir); err != nil {
		return nil, nil, err
	}
	// Connecting never waits for the holder: the kernel queues the
	// connection whether or not it runs.
	addr := &net.UnixAddr{Name: path, Net: "unixpacket"}
	c, err := net.DialUnix("unixpacket", nil, addr)
	// A holder binds its socket a moment before it listens: refused then,
	// it is asked again within the wait, while it lives (holds the lock).
	for until := time.Now().Add(wait); errors.Is(err, unix.ECONNREFUSED) && time.Now().Before(until) && holderLives(path); {
		time.Sleep(5 * time.Millisecond)
		c, err = net.DialUnix("unixpacket", nil, addr)
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil, nil // released meanwhile
	case errors.Is(err, unix.ECONNREFUSED) && !holderLives(path):
		return nil, nil, ErrHolderGone
	case errors.Is(err, unix.ECONNREFUSED):
		return nil, nil, nil // a live holder that did not listen within the wait
	case err != nil:
		return nil, nil, fmt.Errorf("connect to the handover process: %w", err)
	}
	pid, err := peerAllowed(c)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("handover socket %s: %w", path, err)
	}
	if pid > 0 && stopped(pid) {
		c.Close()
		return nil, nil, &StuckError{PID: pid, Stopped: true}
	}
	c.SetDeadline(time.Now().Add(wait))
	if err := send(c, message{Take: true, Manages: manages}, nil); err != nil {
		c.Close()
		return nil, nil, err
	}
	most := MaxFDs
	if k == SharedKey {
		most = MaxSharedFDs
	}
	m, fds, err := receive(c, most)
	if err != nil {
		c.Close()
		if errors.Is(err, errClosed) {
			return nil, nil, nil // taken by another successor, or released meanwhile
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, nil, &StuckError{PID: pid, Stopped: pid > 0 && stopped(pid), Wait: wait}
		}
		return nil, nil, fmt.Errorf("receive the handover: %w", err)
	}
	if m.Offer == nil || !validFDs(k, len(fds)) {
		closeAll(fds)
		c.Close()
		return nil, nil, fmt.Errorf("malformed handover: %d descriptors", len(fds))
	}
	return &Offer{Header: *m.Offer, FDs: fds}, c, nil
}

// stopped reports whether process pid is stopped, by a signal or a tracer.
func stopped(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which may hold spaces and ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	return stat[i+2] == 'T' || stat[i+2] == 't'
}

// Accept tells the holder the attachment is now the caller's, and returns
// the interfaces the holder released because the caller does not manage
// them. The descriptors are the caller's to close. The holder's answer is
// waited for no longer than its offer was.
func (t *Taken) Accept() []string {
	defer t.c.Close()
	t.c.SetDeadline(time.Now().Add(max(t.wait, minAnswerWait)))
	if err := send(t.c, message{Accept: true}, nil); err != nil {
		return nil
	}
	m, fds, err := receive(t.c, 0)
	closeAll(fds)
	if err != nil {
		return nil
	}
	return m.Released
}

// minAnswerWait bounds the wait for the holder's last word after an accept.
const minAnswerWait = 100 * time.Millisecond

// Refuse tells the holder the caller will not take the attachment (the
// holder keeps it until its timeout); the caller must have closed the
// descriptors.
func (t *Taken) Refuse(why string) {
	t.c.SetDeadline(time.Now().Add(max(t.wait, minAnswerWait)))
	send(t.c, message{Refuse: why}, nil)
	t.c.Close()
}
