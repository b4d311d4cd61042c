//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/cilium/ebpf/link"
)

const linkPin = "link"

// attachKept attaches like Attach, but keeps the attachment past the
// process: the link is pinned in dir. A link pinned there by an earlier run
// on the same interface and in the same mode is taken over: this program
// replaces the old one atomically, with no moment unfiltered, and tookOver
// says so.
func (p *Program) attachKept(ifindex int, mode Mode, dir string) (note string, tookOver bool, err error) {
	path := filepath.Join(dir, linkPin)
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		if cur, ok := keptMode(l, ifindex, mode); ok {
			if err := p.update(l, cur); err != nil {
				l.Close()
				return "", false, fmt.Errorf("replace the program of the kept link: %w", err)
			}
			p.inherit(l, cur, mode, "kept")
			return "took over the attachment kept by an earlier run", true, nil
		}
		// Another interface, or another mode: let the old link go.
		l.Unpin()
		l.Close()
		note = "released a kept attachment that no longer fits"
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("open kept link %s: %w", path, err)
	}
	if err := p.Attach(ifindex, mode); err != nil {
		return note, false, err
	}
	if err := p.link.Pin(path); err != nil {
		p.Detach()
		return note, false, fmt.Errorf("pin link at %s: %w", path, err)
	}
	return note, false, nil
}

// keptMode reports whether a kept link is alive on ifindex in a mode that
// mode allows, and which mode it is in.
func keptMode(l link.Link, ifindex int, mode Mode) (Mode, bool) {
	info, err := l.Info()
	if err != nil {
		return "", false
	}
	xdp := info.XDP()
	if xdp == nil || int(xdp.Ifindex) != ifindex {
		return "", false
	}
	_, cur, err := modeOn(ifindex)
	if err != nil || !allows(mode, cur) {
		return "", false
	}
	return cur, true
}

// releaseKept removes a link kept in dir by an earlier run with
// KeepAttached, detaching its program; it reports whether there was one.
func releaseKept(dir string) (bool, error) {
	path := filepath.Join(dir, linkPin)
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open kept link %s: %w", path, err)
	}
	defer l.Close()
	if err := l.Unpin(); err != nil {
		return true, fmt.Errorf("unpin kept link %s: %w", path, err)
	}
	return true, nil
}

// pinLink pins the attachment in dir, as KeepAttached does, replacing a
// link kept there before.
func (p *Program) pinLink(dir string) error {
	if _, err := releaseKept(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, linkPin)
	if err := p.link.Pin(path); err != nil {
		return fmt.Errorf("pin link at %s: %w", path, err)
	}
	return nil
}
