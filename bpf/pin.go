//go:build linux

package bpf

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
)

// Counter pins are named by the map and the fingerprint of what they count.
const (
	countersPin     = "counters_"
	ruleCountersPin = "rule_counters_"
)

// loadFor loads a program for the interface of w, with its counters pinned
// when PinPath is set and usable; pinned says whether they are. When the
// pin directory cannot be used (no BPF filesystem, no permission) the
// program is loaded without pins and a note names the fix: the drop policy
// is enforced, and only counter continuity (and KeepAttached) is lost.
func (in *Instance) loadFor(w Want, got *Got) (p *Program, pinned bool, err error) {
	defer func() {
		if err == nil {
			if note := p.PrefixNote(); note != "" {
				got.warn("%s", note)
			}
		}
	}()
	if w.PinPath == "" {
		p, err = in.loadFresh()
		return p, false, err
	}
	p, err = in.loadPinnedFor(w, got)
	var unpinnable *UnpinnableError
	if errors.As(err, &unpinnable) {
		lost := "counters restart at every restart"
		if w.KeepAttached {
			lost += " and nothing keeps it attached while no agent runs"
		}
		got.Notes = append(got.Notes, Note{Kind: NoteUnpinned, Warn: true, Err: err, Text: fmt.Sprintf("attaching without pins, so %s: %v", lost, err)})
		p, err = in.loadFresh()
		return p, false, err
	}
	return p, err == nil, err
}

// loadFresh loads a program of the instance with fresh counters.
func (in *Instance) loadFresh() (*Program, error) {
	spec, err := in.spec()
	if err != nil {
		return nil, err
	}
	return in.load(spec, nil)
}

// loadPinnedFor loads a program with its counters pinned in the
// interface's pin directory, after releasing a link an earlier run kept
// there when KeepAttached is off now.
func (in *Instance) loadPinnedFor(w Want, got *Got) (*Program, error) {
	dir, err := pinDir(w, got)
	if err != nil {
		return nil, err
	}
	if err := checkKeptLinkFree(dir); err != nil {
		return nil, &PinDirError{Root: w.PinPath, Reason: PinDirKeptLinkHeld, Err: err}
	}
	if !w.KeepAttached {
		if released, err := releaseKept(dir); err != nil {
			return nil, err
		} else if released {
			got.Notes = append(got.Notes, Note{Kind: NoteKeptReleased, Warn: true, Text: "released the attachment an earlier run kept (keeping it is off now)"})
		}
	}
	p, note, err := in.loadPinned(dir)
	if err != nil {
		return nil, err
	}
	if note != "" {
		got.info("%s (%s)", note, dir)
	}
	return p, nil
}

// pinTakenOver pins what PinPath and KeepAttached ask for: the
// handed-over program may have run without them.
func (in *Instance) pinTakenOver(w Want, p *Program, continued bool, got *Got) {
	if w.PinPath == "" {
		return
	}
	dir, err := pinDir(w, got)
	if err != nil {
		got.Notes = append(got.Notes, Note{Kind: NoteTakenOverUnpinned, Warn: true, Err: err, Text: fmt.Sprintf("taken over without pins, so counters restart at every restart: %v", err)})
		return
	}
	if continued {
		if err := p.pinCounters(dir); err != nil {
			got.warn("%v", err)
		}
	}
	if w.KeepAttached {
		if err := p.pinLink(dir); err != nil {
			got.warn("%v", err)
		}
	}
}

// loadPinned loads a program of the instance, with its counters (and, with
// rules, its rule counters) pinned in dir: counters pinned there by an
// earlier run with the same program and policy are continued; counters
// pinned under another program or policy are unpinned and replaced, and
// note says so.
func (in *Instance) loadPinned(dir string) (p *Program, note string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("create pin directory: %w", err)
	}
	fp := in.fingerprint
	spec, err := in.spec()
	if err != nil {
		return nil, "", err
	}
	wanted := map[string]string{xdpDropMapCounters: countersPin + fp}
	if in.hasRuleCounters() {
		wanted[xdpDropMapRuleCounters] = ruleCountersPin + fp
	}
	pinned := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range pinned {
			m.Close()
		}
	}()
	for mapName, name := range wanted {
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("open pinned counters %s: %w", path, err)
		}
		pinned[mapName] = m
		if err := spec.Maps[mapName].Compatible(m); err != nil {
			return nil, "", fmt.Errorf("pinned counters %s do not fit this program: %w; remove the pin", path, err)
		}
	}
	// Counters continue only together: the frames of a class are split
	// between them by the action they got.
	if len(pinned) != len(wanted) {
		for _, m := range pinned {
			m.Close()
		}
		clear(pinned)
	}
	if len(pinned) > 0 {
		note = "continuing pinned counters"
	}

	p, err = in.load(spec, pinned)
	if err != nil {
		return nil, "", err
	}
	// Only now that the program is loaded: a failed load keeps the old pins.
	keep := map[string]bool{}
	if len(pinned) > 0 {
		for _, name := range wanted {
			keep[name] = true
		}
	}
	removed, err := removeCounterPins(dir, keep)
	if err != nil {
		p.Close()
		return nil, "", err
	}
	if removed > 0 {
		note = "counters pinned under another policy or program version were dropped; counting starts from zero"
	}
	if len(pinned) == 0 {
		for _, pin := range p.counterPins() {
			path := filepath.Join(dir, pin.name)
			if err := pin.m.Pin(path); err != nil {
				p.Close()
				return nil, "", fmt.Errorf("pin %s at %s: %w", pin.what, path, err)
			}
		}
	}
	return p, note, nil
}

// pinCounters pins the counters (and the rule counters of a program with
// rules) in dir under the fingerprint's names, replacing counters pinned
// there under any other, as loadPinned would have: for a program taken over in place
// whose counters continue.
func (p *Program) pinCounters(dir string) error {
	pins := p.counterPins()
	same := true
	for _, pin := range pins {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pin.name), nil)
		if err != nil {
			same = false
			break
		}
		same = sameMap(m, pin.m)
		m.Close()
		if !same {
			break
		}
	}
	if same {
		return nil
	}
	if _, err := removeCounterPins(dir, nil); err != nil {
		return err
	}
	for _, pin := range pins {
		path := filepath.Join(dir, pin.name)
		if err := pin.m.Pin(path); err != nil {
			return fmt.Errorf("pin %s at %s: %w", pin.what, path, err)
		}
	}
	return nil
}

// counterPin is a counter map of p and the name it is pinned under.
type counterPin struct {
	name, what string
	m          *ebpf.Map
}

// counterPins are the maps a pin keeps of p: its counters, and its rule
// counters when it has rules.
func (p *Program) counterPins() []counterPin {
	pins := []counterPin{{countersPin + p.in.fingerprint, "counters", p.objs.Counters}}
	if p.objs.RuleCounters != nil {
		pins = append(pins, counterPin{ruleCountersPin + p.in.fingerprint, "rule counters", p.objs.RuleCounters})
	}
	return pins
}

func sameMap(a, b *ebpf.Map) bool {
	ai, err1 := a.Info()
	bi, err2 := b.Info()
	if err1 != nil || err2 != nil {
		return false
	}
	aid, _ := ai.ID()
	bid, _ := bi.ID()
	return aid == bid
}

// removeCounterPins unpins the counters this package pinned in dir, but
// those named in keep, and returns how many it unpinned.
func removeCounterPins(dir string, keep map[string]bool) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("list pinned counters in %s: %w", dir, err)
	}
	removed := 0
	for _, e := range entries {
		if e.Name() == linkPin || keep[e.Name()] || !isOurPin(e.Name()) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return removed, fmt.Errorf("unpin stale counters %s: %w", filepath.Join(dir, e.Name()), err)
		}
		removed++
	}
	return removed, nil
}

// isOurPin reports whether a file name in an interface's pin directory is
// one this package pins: the link, or counters or rule counters named by a
// fingerprint.
func isOurPin(name string) bool {
	if name == linkPin {
		return true
	}
	fp, ok := strings.CutPrefix(name, countersPin)
	if !ok {
		fp, ok = strings.CutPrefix(name, ruleCountersPin)
	}
	if !ok || len(fp) != 16 {
		return false
	}
	_, err := hex.DecodeString(fp)
	return err == nil
}

// RemovePins unpins what this package pinned in dir for an interface that
// is gone, so that an interface created later under the same name starts
// afresh. Anything else in dir is not ours: it is left, with the directory,
// and returned by name.
func RemovePins(dir string) (left []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pins in %s: %w", dir, err)
	}
	for _, e := range entries {
		if !isOurPin(e.Name()) {
			left = append(left, e.Name())
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return nil, fmt.Errorf("unpin %s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	if len(left) > 0 {
		return left, nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove pin directory %s: %w", dir, err)
	}
	return nil, nil
}
