//go:build linux

package bpf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FDsPerInterface is how many file descriptors an attached Program without
// rules holds: the program, its counter map, its read-only policy map and
// its link. Rules add one for their counters, four for prefixes (buckets,
// exact prefixes, two tries) and one for ports.
const FDsPerInterface = 4

// FDs is how many file descriptors an attached Program of policy holds at
// most: FDsPerInterface, one more for the rule counters when it has rules,
// four more when its rules use prefixes, one more when they use ports,
// six more when it samples (three maps and the reader of the ring) (a
// program taken over in place holds no prefix or port map).
func (p Policy) FDs() int {
	n := FDsPerInterface
	var prefixes, ports bool
	for _, r := range p.Rules {
		prefixes = prefixes || len(r.SrcPrefixes)+len(r.DstPrefixes) > 0
		ports = ports || r.hasPorts()
	}
	if len(p.Rules) > 0 {
		n++
	}
	if prefixes {
		n += 4
	}
	if ports {
		n++
	}
	if p.Sample.On() {
		// Sample states, bucket and ring, and the ring's reader: its
		// epoll descriptor and the two event descriptors that wake it
		// (to close, to flush).
		n += 6
	}
	return n
}

// loadFDs is how many descriptors a load needs at once: those it keeps,
// the six rule maps (rule counters among them) and the three sampling
// maps, which it closes again when nothing uses them.
const loadFDs = FDsPerInterface + 6 + 3

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
