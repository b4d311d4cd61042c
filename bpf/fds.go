//go:build linux

package bpf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FDsPerInterface is how many file descriptors an attached Program without
// rules holds: the program, its counter map, its read-only policy map and
// its link. Rules add one for their counters; their other maps are the
// instance's (SharedFDs).
const FDsPerInterface = 4

// FDs is how many file descriptors an attached Program of policy holds:
// FDsPerInterface, one more for the rule counters when it has rules or
// bans, one for the ban counters with bans, and six more when it samples:
// its three sampling maps, and the reader of its ring (an epoll descriptor
// and two event descriptors that wake it).
func (p Policy) FDs() int {
	p = withFlowSpec(p)
	n := FDsPerInterface
	if len(p.Rules) > 0 || p.Bans.On {
		n++
	}
	if p.Bans.On {
		n++
	}
	if p.Sample.On() {
		n += 6
	}
	if p.FlowSpec.On {
		n++ // the FlowSpec counters
	}
	return n
}

// SharedFDs is how many file descriptors an Instance of policy holds once
// for all its interfaces: the rule maps, when it has rules, the limiter's
// cells with limit rules, and the ban maps with bans.
func (p Policy) SharedFDs() int {
	p = withFlowSpec(p)
	n := 0
	switch {
	case p.hasLimits():
		n = ruleMapCount + 1
	case len(p.Rules) > 0:
		n = ruleMapCount
	}
	if p.Bans.On {
		n += banMapCount
	}
	if p.FlowSpec.On {
		n += flowMapCount + 2 // and the grace map with its inner map
	}
	return n
}

// loadFDs is how many descriptors a load needs at once: those it keeps,
// the seven rule maps (rule counters and the limiter's cells among them),
// which it closes again when no rule uses them, the three sampling maps
// and the ban counters.
const loadFDs = FDsPerInterface + 7 + 3 + 1 + flowMapCount + 1

// errOutOfFDs returns an error wrapping EMFILE when fewer descriptors are
// left under RLIMIT_NOFILE than a load needs, or nil. A load that failed
// checks it, because cilium/ebpf explains a failed map creation with a
// feature probe that then fails too and reports the kernel too old.
func errOutOfFDs() error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return nil
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil && !os.IsPermission(err) {
		// Even the listing may need the descriptor that is missing.
		return fmt.Errorf("%w (listing them failed too: %v)", unix.EMFILE, err)
	}
	n := uint64(len(open)) - 1 // less the one that listed them
	if err == nil && n+loadFDs <= lim.Cur {
		return nil
	}
	return fmt.Errorf("%w (%d of %d open)", unix.EMFILE, n, lim.Cur)
}
