package xdp_drop

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// listedPrefixes counts the prefixes every prefix file together lists, by
// family, repeats counted: what reading them holds in memory.
type listedPrefixes struct{ FamilyCount }

// check refuses more than bpf.MaxPrefixes listed of a family, once pf's
// contents are counted in: reading stops there.
func (l *listedPrefixes) check(pf *prefixFile) error {
	for _, f := range []struct {
		name string
		n    int
	}{{"IPv4", l.IPv4}, {"IPv6", l.IPv6}} {
		if f.n > bpf.MaxPrefixes {
			return fmt.Errorf("%s: with %s the prefix files list %d %s prefixes (repeats counted); at most %d per family fit: shorten or merge the lists",
				pf.key, pf.path, f.n, f.name, bpf.MaxPrefixes)
		}
	}
	return nil
}

// checkPrefixTotals refuses rules that list more prefixes of a family than
// the program holds.
func checkPrefixTotals(rules []bpf.Rule) error {
	var n FamilyCount
	for i := range rules {
		n.add(1, rules[i].SrcPrefixes...)
		n.add(1, rules[i].DstPrefixes...)
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"IPv4", n.IPv4}, {"IPv6", n.IPv6}} {
		if f.n > bpf.MaxPrefixes {
			return fmt.Errorf("the rules and their prefix files list %d %s prefixes; at most %d per family fit: shorten the lists, or merge adjacent prefixes", f.n, f.name, bpf.MaxPrefixes)
		}
	}
	return nil
}

// swapMemory is the memory limit while a changed set is read and swapped
// in, against what the Go runtime holds when it starts.
const swapMemory = 1.5

// boundMemory caps the Go runtime's memory while a changed set is read,
// compiled and swapped in: the new set is built beside the one in force,
// and without a limit the collector lets the heap grow to twice its live
// size first, which took the process to 3× its steady RSS for a
// 100,000-prefix list (BENCHMARKS.md). The limit is soft: the collector
// works harder near it, nothing fails. A lower limit set by GOMEMLIMIT is
// kept. releaseMemory restores it.
func (pl *prefixLists) boundMemory() {
	if pl.memoryBound {
		return
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := debug.SetMemoryLimit(-1)
	pl.memoryBound, pl.memoryBefore = true, before
	debug.SetMemoryLimit(min(before, int64(float64(ms.Sys-ms.HeapReleased)*swapMemory)))
}

// releaseMemory restores the memory limit boundMemory set, and returns what
// the swap freed to the system.
func (pl *prefixLists) releaseMemory() {
	if !pl.memoryBound {
		return
	}
	debug.SetMemoryLimit(pl.memoryBefore)
	pl.memoryBound = false
	debug.FreeOSMemory()
}
