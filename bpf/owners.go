//go:build linux

package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Owner is a process that holds a BPF link open.
type Owner struct {
	PID  int
	Comm string
}

func (h Owner) String() string { return fmt.Sprintf("%d (%s)", h.PID, h.Comm) }

// LiveOwnerError is returned when the xdp_drop program in the way is
// attached through a link that a running process holds, or may hold: a
// running instance, which Want.Replace must not fight.
type LiveOwnerError struct {
	ID     ebpf.ProgramID
	Link   link.ID
	Owners []Owner // empty when no process could be seen holding the link
}

func (e *LiveOwnerError) Error() string {
	if len(e.Owners) == 0 {
		return fmt.Sprintf("XDP program id %d (%s) is attached through link id %d, which no process this one can see holds: it may belong to a running instance", e.ID, ProgramName, e.Link)
	}
	pids := make([]string, len(e.Owners))
	for i, h := range e.Owners {
		pids[i] = h.String()
	}
	return fmt.Sprintf("XDP program id %d (%s) belongs to a running instance: process %s holds its link id %d", e.ID, ProgramName, strings.Join(pids, ", "), e.Link)
}

// checkNotLive returns a *LiveOwnerError when the XDP program id on ifindex
// is attached through a link held by a running process, or by a process
// whose descriptors this one cannot read. A program attached through netlink,
// or through a link that only a pin keeps, has no running owner.
func checkNotLive(ifindex int, id ebpf.ProgramID) error {
	l, err := findXDPLink(ifindex, id)
	if err != nil || l == nil {
		return err
	}
	info, err := l.Info()
	l.Close()
	if err != nil {
		return fmt.Errorf("read link info of program %d: %w", id, err)
	}
	owners, complete, err := processesHolding(info.ID)
	if err != nil {
		return err
	}
	if len(owners) > 0 || !complete {
		return &LiveOwnerError{ID: id, Link: info.ID, Owners: owners}
	}
	return nil
}

// processesHolding lists the processes holding link id, this one included, and
// reports whether every process's descriptors could be read.
func processesHolding(id link.ID) (owners []Owner, complete bool, err error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false, fmt.Errorf("list processes: %w", err)
	}
	complete = true
	want := strconv.FormatUint(uint64(id), 10)
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		holds, readable := holdsLink(pid, want)
		complete = complete && readable
		if holds {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			owners = append(owners, Owner{PID: pid, Comm: strings.TrimSpace(string(comm))})
		}
	}
	return owners, complete, nil
}

// holdsLink reports whether process pid has a descriptor of the BPF link
// whose id is want, and whether its descriptors could be read (a process
// that exited meanwhile counts as read).
func holdsLink(pid int, want string) (holds, readable bool) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrPermission) {
		return false, false
	}
	if err != nil {
		return false, true
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil || target != "anon_inode:bpf_link" {
			continue
		}
		if fdinfoField(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()), "link_id") == want {
			return true, true
		}
	}
	return false, true
}

// fdinfoField returns the value of key in an fdinfo file, or "".
func fdinfoField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// checkKeptLinkFree returns a *LiveOwnerError when the link kept in dir
// (KeepAttached) is held by another running process: an instance with the
// same PinPath, whose pins must be neither taken over nor released.
func checkKeptLinkFree(dir string) error {
	l, err := link.LoadPinnedLink(filepath.Join(dir, linkPin), nil)
	if err != nil {
		return nil // none, or unreadable: using the pins reports it
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return nil
	}
	owners, _, err := processesHolding(info.ID)
	if err != nil {
		return err
	}
	var others []Owner
	for _, h := range owners {
		if h.PID != os.Getpid() {
			others = append(others, h)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return &LiveOwnerError{ID: info.Program, Link: info.ID, Owners: others}
}
