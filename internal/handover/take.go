//go:build linux

package handover

import (
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
	c *net.UnixConn
}

// Offered reports whether a holder offers the interface k.
func Offered(dir string, k Key) bool {
	_, err := os.Stat(socketPath(dir, k))
	return err == nil
}

// Take asks the holder that offers interface k, if any, for its
// attachment; manages lists every interface the caller manages, so that
// the holder can release the ones it does not. It returns nil when nothing
// is offered.
func Take(dir string, k Key, manages []Key) (*Taken, error) {
	path := socketPath(dir, k)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
		return nil, nil // left by a holder that has gone
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the handover process: %w", err)
	}
	if _, err := peerAllowed(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("handover socket %s: %w", path, err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := send(c, message{Take: true, Manages: manages}, nil); err != nil {
		c.Close()
		return nil, err
	}
	m, fds, err := receive(c, MaxFDs)
	if err != nil {
		c.Close()
		if errors.Is(err, errClosed) {
			return nil, nil // taken by another successor, or released meanwhile
		}
		return nil, fmt.Errorf("receive the handover: %w", err)
	}
	if m.Offer == nil || !validFDs(len(fds)) {
		closeAll(fds)
		c.Close()
		return nil, fmt.Errorf("malformed handover: %d descriptors", len(fds))
	}
	return &Taken{Offer: Offer{Header: *m.Offer, FDs: fds}, c: c}, nil
}

// Accept tells the holder the attachment is now the caller's, and returns
// the interfaces the holder released because the caller does not manage
// them. The descriptors are the caller's to close.
func (t *Taken) Accept() []string {
	defer t.c.Close()
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

// Refuse tells the holder the caller will not take the attachment (the
// holder keeps it until its timeout); the caller must have closed the
// descriptors.
func (t *Taken) Refuse(why string) {
	send(t.c, message{Refuse: why}, nil)
	t.c.Close()
}
