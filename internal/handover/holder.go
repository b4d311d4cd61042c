//go:build linux

package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/signame"
)

// Logger receives the holder's log lines.
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
}

// Holder keeps offered attachments for at most a timeout and gives each to
// the first successor that asks for its interface.
type Holder struct {
	Dir     string
	Timeout time.Duration
	Log     Logger

	mu     sync.Mutex
	held   map[Key]*held
	shared *held         // the shared offer (SharedKey); nil once released
	done   chan struct{} // closed when nothing is held any more
	closed bool
}

type held struct {
	offer Offer
	ln    *net.UnixListener
	lock  *os.File // the socket's lock, held while it is offered on
	// taking: a successor has the descriptors and has not answered yet.
	taking bool
}

// NewHolder starts offering each attachment on its socket in dir. An
// offer that cannot be offered is released at once; its error is returned
// at its index (nil for the ones offered).
func NewHolder(dir string, timeout time.Duration, offers []Offer, log Logger) (*Holder, []error) {
	h := &Holder{Dir: dir, Timeout: timeout, Log: log, held: make(map[Key]*held), done: make(chan struct{})}
	errs := make([]error, len(offers))
	dirErr := ensureDir(dir)
	for i, o := range offers {
		if dirErr != nil {
			errs[i] = dirErr
			closeAll(o.FDs)
			continue
		}
		path := socketPath(dir, o.Key)
		lock, err := lockSocket(path)
		var ln *net.UnixListener
		if err == nil {
			if ln, err = listen(path); err != nil {
				unlockSocket(path, lock)
			}
		}
		if err != nil {
			errs[i] = err
			closeAll(o.FDs)
			continue
		}
		if o.Key == SharedKey && h.shared == nil {
			h.shared = &held{offer: o, ln: ln, lock: lock}
			continue
		}
		h.held[o.Key] = &held{offer: o, ln: ln, lock: lock}
	}
	if len(h.held) == 0 {
		// The shared offer serves the interfaces' successor only.
		h.releaseShared()
		h.closed = true
		close(h.done)
	}
	for _, hd := range h.held {
		go h.serve(hd)
	}
	if h.shared != nil {
		go h.serveShared(h.shared)
	}
	return h, errs
}

// listen binds the socket at path. A socket file left by a holder that
// died is replaced; a live one means another holder offers the interface.
func listen(path string) (*net.UnixListener, error) {
	addr := &net.UnixAddr{Name: path, Net: "unixpacket"}
	ln, err := net.ListenUnix("unixpacket", addr)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, unix.EADDRINUSE) {
		return nil, fmt.Errorf("offer on %s: %w", path, err)
	}
	if c, derr := net.DialUnix("unixpacket", nil, addr); derr == nil {
		c.Close()
		return nil, fmt.Errorf("offer on %s: another handover process already offers this interface", path)
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("remove stale handover socket: %w", err)
	}
	ln, err = net.ListenUnix("unixpacket", addr)
	if err != nil {
		return nil, fmt.Errorf("offer on %s: %w", path, err)
	}
	return ln, nil
}

// Wait blocks until everything is taken over, the timeout passes or stop
// delivers; whatever is still held is then released.
func (h *Holder) Wait(stop <-chan os.Signal) {
	timer := time.NewTimer(h.Timeout)
	defer timer.Stop()
	select {
	case <-h.done:
		h.mu.Lock()
		h.releaseShared()
		h.mu.Unlock()
		h.Log.Infof("handover process %d: everything taken over or released; exiting", os.Getpid())
	case <-timer.C:
		h.releaseAll(fmt.Sprintf("released after %s: no successor", h.Timeout),
			fmt.Sprintf("released after %s, while a successor was taking it over (it holds the attachment itself)", h.Timeout))
	case sig := <-stop:
		why := fmt.Sprintf("released at once: the handover process received %s", signame.Name(sig))
		h.releaseAll(why, why+", while a successor was taking it over (it holds the attachment itself)")
	}
}

// releaseAll releases everything held, logging why, or whyTaking for an
// offer whose descriptors a successor has and has not answered for.
func (h *Holder) releaseAll(why, whyTaking string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, hd := range h.held {
		if hd.taking {
			h.Log.Infof("interface %s: %s", quote.Value(hd.offer.Interface), whyTaking)
		} else {
			h.Log.Infof("interface %s: %s", quote.Value(hd.offer.Interface), why)
		}
		h.drop(k, hd)
	}
	h.releaseShared()
}

// releaseShared closes the shared offer. The caller holds h.mu, or is
// NewHolder.
func (h *Holder) releaseShared() {
	if h.shared == nil {
		return
	}
	h.shared.ln.Close()
	unlockSocket(socketPath(h.Dir, SharedKey), h.shared.lock)
	closeAll(h.shared.offer.FDs)
	h.shared = nil
}

// serveShared gives the shared offer to every successor that asks, until
// it is released; each gets copies of the descriptors, and owes no answer.
func (h *Holder) serveShared(hd *held) {
	for {
		c, err := hd.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		h.handleShared(hd, c)
	}
}

func (h *Holder) handleShared(hd *held, c *net.UnixConn) {
	defer c.Close()
	if _, err := peerAllowed(c); err != nil {
		h.Log.Warnf("refused a request for the shared maps: %v", err)
		return
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req, fds, err := receive(c, 0)
	closeAll(fds)
	if err != nil || !req.Take {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shared != hd {
		return // released meanwhile: the descriptors are closed
	}
	hdr := hd.offer.Header
	send(c, message{Offer: &hdr}, hd.offer.FDs)
}

// drop closes an offer: its socket and, unless a successor now holds
// them too, the attachment with it. The caller holds h.mu.
func (h *Holder) drop(k Key, hd *held) {
	hd.ln.Close()
	unlockSocket(socketPath(h.Dir, k), hd.lock)
	closeAll(hd.offer.FDs)
	delete(h.held, k)
}

// doneIfEmpty ends Wait once nothing is held; a handler calls it after its
// last word to the successor, which an exit would cut off.
func (h *Holder) doneIfEmpty() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) == 0 && !h.closed {
		h.closed = true
		close(h.done)
	}
}

func (h *Holder) serve(hd *held) {
	for {
		c, err := hd.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		if h.handle(hd, c) {
			return
		}
	}
}

// handle answers one connection; it reports whether the offer was taken.
func (h *Holder) handle(hd *held, c *net.UnixConn) bool {
	defer c.Close()
	if _, err := peerAllowed(c); err != nil {
		h.Log.Warnf("interface %s: refused a handover request: %v", quote.Value(hd.offer.Interface), err)
		return false
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req, fds, err := receive(c, 0)
	if err != nil || !req.Take {
		closeAll(fds)
		return false
	}
	h.mu.Lock()
	_, ok := h.held[hd.offer.Key]
	if ok {
		// Sent below, while still held: the descriptors are not closed
		// meanwhile, since releasing needs h.mu.
		hd.taking = true
		hdr := hd.offer.Header
		err = send(c, message{Offer: &hdr}, hd.offer.FDs)
		hd.taking = err == nil
	}
	h.mu.Unlock()
	if !ok {
		return true
	}
	if err != nil {
		return false
	}
	// The successor checks what it got and may load a program first.
	c.SetDeadline(time.Now().Add(30 * time.Second))
	ans, fds, err := receive(c, 0)
	closeAll(fds)
	h.mu.Lock()
	hd.taking = false
	h.mu.Unlock()
	if err != nil || !ans.Accept {
		if ans.Refuse != "" {
			h.Log.Warnf("interface %s: the successor refused the handover: %s; still held", quote.Value(hd.offer.Interface), ans.Refuse)
		}
		return false
	}
	h.mu.Lock()
	h.drop(hd.offer.Key, hd)
	released := h.releaseUnmanaged(req.Manages, hd.offer.NetNS)
	h.mu.Unlock()
	send(c, message{Released: released}, nil)
	h.doneIfEmpty()
	return true
}

// releaseUnmanaged releases at once what a successor that has just taken
// over one interface does not manage. The caller holds h.mu.
func (h *Holder) releaseUnmanaged(manages []Key, netns uint64) []string {
	managed := make(map[Key]bool, len(manages))
	for _, k := range manages {
		managed[k] = true
	}
	var released []string
	for k, hd := range h.held {
		if k.NetNS == netns && !managed[k] {
			h.Log.Infof("interface %s: released at once: the successor does not manage it", quote.Value(hd.offer.Interface))
			released = append(released, hd.offer.Interface)
			h.drop(k, hd)
		}
	}
	return released
}
