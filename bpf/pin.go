//go:build linux

package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// DefaultBPFFS is where Linux conventionally mounts the BPF filesystem.
const DefaultBPFFS = "/sys/fs/bpf"

// fingerprint names the program build and policy whose counters a pin
// holds: counters pinned under another policy or program must not be mixed
// with new ones, since the action of a class depends on both.
func (p Policy) fingerprint() string {
	h := sha256.New()
	h.Write(_XdpDropBytes)
	// What the policy selects, not the verdicts: a dry run passes all, yet
	// its would_drop counts depend on the drop list.
	var selected [ClassCount]byte
	for c := range selected {
		if p.Drops(Class(c)) {
			selected[c] = 1
		}
	}
	h.Write(selected[:])
	if p.DryRun {
		h.Write([]byte("dry_run"))
	}
	// Rule counters are by position, and the rules decide the actions.
	for _, r := range p.Rules {
		if len(r.PrefixFiles) > 0 {
			fmt.Fprintf(h, "rule %q %v %v files %q %v %v\n", r.Name, r.Drop, r.Protocols, r.PrefixFiles, r.SrcPorts, r.DstPorts)
			continue
		}
		fmt.Fprintf(h, "rule %q %v %v %v %v %v %v\n", r.Name, r.Drop, r.Protocols, r.SrcPrefixes, r.DstPrefixes, r.SrcPorts, r.DstPorts)
	}
	if p.PerQueue {
		h.Write([]byte("per_queue"))
	}
	// Whether it samples, not how: a handed-over program is continued only
	// with the same code (see Adopt).
	if p.Sample.On() {
		h.Write([]byte("sample"))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// EnsureBPFFS checks that dir is on a BPF filesystem. When dir lies under
// /sys/fs/bpf and nothing is mounted there, it mounts one, as systemd does.
func EnsureBPFFS(dir string) (mounted bool, err error) {
	if onBPFFS(dir) {
		return false, nil
	}
	clean := filepath.Clean(dir)
	if clean == DefaultBPFFS || strings.HasPrefix(clean, DefaultBPFFS+"/") {
		if !onBPFFS(DefaultBPFFS) {
			if err := unix.Mount("bpf", DefaultBPFFS, "bpf", 0, "mode=0700"); errors.Is(err, unix.EPERM) {
				return false, fmt.Errorf("%w: no BPF filesystem on %s, and mounting one needs CAP_SYS_ADMIN, which this process lacks; "+
					"as root run: mount -t bpf bpf %s (systemd mounts it at boot; ip netns exec mounts a /sys without it: use nsenter --net instead)",
					ErrPinning, DefaultBPFFS, DefaultBPFFS)
			} else if err != nil {
				return false, fmt.Errorf("%w: mount the BPF filesystem on %s: %v (mount it with: mount -t bpf bpf %s)", ErrPinning, DefaultBPFFS, err, DefaultBPFFS)
			}
			return true, nil
		}
		return false, nil
	}
	return false, fmt.Errorf("%w: %s is not on a BPF filesystem: use a path under %s, or mount one with: mount -t bpf bpf DIR", ErrPinning, dir, DefaultBPFFS)
}

// ErrPrivateBPFFS is returned when the BPF filesystem under a pin path is
// visible only in this process's mount namespace: its pins vanish with the
// process.
var ErrPrivateBPFFS = errors.New("the BPF filesystem there is private to this process's mount namespace (ip netns exec, for one, mounts a fresh /sys without the host's BPF filesystem), so its pins vanish when the process exits")

// CheckPersistent returns ErrPrivateBPFFS when the BPF filesystem holding
// dir is not mounted in the mount namespace of PID 1, which outlives this
// process. When PID 1's mounts cannot be read it cannot tell, and returns nil.
func CheckPersistent(dir string) error {
	var st unix.Stat_t
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if err := unix.Stat(d, &st); err == nil {
			break
		}
		if d == "/" {
			return nil
		}
	}
	mounts, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return nil
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, line := range strings.Split(string(mounts), "\n") {
		// mount ID, parent ID, major:minor, root, mount point, ... - fstype ...
		fields := strings.Fields(line)
		_, post, ok := strings.Cut(line, " - ")
		if ok && len(fields) > 2 && fields[2] == dev && strings.HasPrefix(post, "bpf ") {
			return nil
		}
	}
	return ErrPrivateBPFFS
}

// onBPFFS reports whether the closest existing ancestor of dir is on bpffs.
func onBPFFS(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err == nil {
			return st.Type == unix.BPF_FS_MAGIC
		}
		if d == "/" {
			return false
		}
	}
}

// CheckPinDir returns an error when path exists and is not a directory,
// naming what it is instead (a pinned map, program or link on bpffs).
func CheckPinDir(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && st.IsDir() {
		return nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil // creating the pin directory says what blocks and how to fix it
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s is %s, not a directory", path, pinnedKind(path))
}

// pinnedKind names the BPF object pinned at path, or "a file".
func pinnedKind(path string) string {
	if m, err := ebpf.LoadPinnedMap(path, nil); err == nil {
		m.Close()
		return "a pinned BPF map"
	}
	if p, err := ebpf.LoadPinnedProgram(path, nil); err == nil {
		p.Close()
		return "a pinned BPF program"
	}
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		l.Close()
		return "a pinned BPF link"
	}
	return "a file"
}

// LoadPinned loads the program like Load, with its counters (and, with
// rules, its rule counters) pinned in dir: counters pinned there by an
// earlier run with the same program and policy are continued; counters
// pinned under another program or policy are unpinned and replaced, and
// note says so.
func LoadPinned(policy Policy, dir string) (p *Program, note string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("create pin directory: %w", err)
	}
	fp := policy.fingerprint()
	spec, rules, err := configuredSpec(policy)
	if err != nil {
		return nil, "", err
	}
	wanted := map[string]string{xdpDropMapCounters: countersPin + fp}
	if rules.count > 0 {
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

	var opts *ebpf.CollectionOptions
	if len(pinned) > 0 {
		opts = &ebpf.CollectionOptions{MapReplacements: pinned}
	}
	p, err = load(spec, policy, rules, opts)
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

const linkPin = "link"

// AttachKept attaches like Attach, but keeps the attachment past the
// process: the link is pinned in dir. A link pinned there by an earlier run
// on the same interface and in the same mode is taken over: this program
// replaces the old one atomically, with no moment unfiltered.
func (p *Program) AttachKept(ifindex int, mode Mode, dir string) (note string, err error) {
	path := filepath.Join(dir, linkPin)
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		cur, ok := p.adoptable(l, ifindex, mode)
		if ok {
			if err := p.update(l, cur); err != nil {
				l.Close()
				return "", fmt.Errorf("replace the program of the kept link: %w", err)
			}
			p.link, p.mode = l, cur
			if mode == ModeAuto && cur == ModeGeneric {
				p.nativeErr = errors.New("the kept attachment is in generic mode, as an earlier run attached it (configured so, or fallen back), and a link keeps its mode: native mode is tried when the interface is attached afresh")
			}
			return "took over the attachment kept by an earlier run", nil
		}
		// Another interface, or another mode: let the old link go.
		l.Unpin()
		l.Close()
		note = "released a kept attachment that no longer fits"
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("open kept link %s: %w", path, err)
	}
	if err := p.Attach(ifindex, mode); err != nil {
		return note, err
	}
	if err := p.link.Pin(path); err != nil {
		p.Detach()
		return note, fmt.Errorf("pin link at %s: %w", path, err)
	}
	return note, nil
}

// Kept reports whether the attachment is pinned (keep_attached), so that
// it outlives the process.
func (p *Program) Kept() bool {
	l, ok := p.link.(interface{ IsPinned() bool })
	return ok && l.IsPinned()
}

// update puts the program into a kept link; where the device refuses the
// single-buffer program in native mode (its MTU needs multi-buffer XDP),
// the multi-buffer variant goes in instead.
func (p *Program) update(l link.Link, mode Mode) error {
	err := l.Update(p.objs.Prog)
	if err == nil || mode != ModeNative || p.multiBuffer {
		return err
	}
	alt, mbErr := p.loadMultiBuffer()
	if mbErr != nil {
		return err
	}
	if altErr := l.Update(alt); altErr != nil {
		alt.Close()
		return err
	}
	p.adopt(alt)
	return nil
}

// adoptable reports whether a kept link is alive on ifindex in a mode that
// mode allows, and which mode it is in.
func (p *Program) adoptable(l link.Link, ifindex int, mode Mode) (Mode, bool) {
	info, err := l.Info()
	if err != nil {
		return "", false
	}
	xdp := info.XDP()
	if xdp == nil || int(xdp.Ifindex) != ifindex {
		return "", false
	}
	_, attachMode, err := xdpProgramOn(ifindex)
	if err != nil {
		return "", false
	}
	m, ok := attachedMode(attachMode)
	if !ok {
		return "", false
	}
	cur := m.mode
	if mode == cur || mode == ModeAuto && cur != ModeOffload {
		return cur, true
	}
	return "", false
}

// ReleaseKept removes a link kept in dir by an earlier run with
// keep_attached, detaching its program; it reports whether there was one.
func ReleaseKept(dir string) (bool, error) {
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

// Counter pins are named by the map and the fingerprint of what they count.
const (
	countersPin     = "counters_"
	ruleCountersPin = "rule_counters_"
)

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
