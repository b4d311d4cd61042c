//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = st.Dev, st.Ino
		s.ctime = st.Ctim.Nano()
	}
	return s
}

// swapPrefixes puts the rule prefixes in force on every attached interface
// whose program holds another set, without a gap (bpf.Program.SwapRules).
// The set is compiled once, into the instance of this generation; the
// first interface fills its rule maps, the others load their programs on
// them, as many at once as there are CPUs (each load is verified apart).
// An interface whose swap fails keeps its set, which its rule points
// report with the error, and is tried again at the next gather.
func (x *XDPDrop) swapPrefixes(acc telegraf.Accumulator) {
	defer x.files.releaseMemory()
	defer func() { x.files.noteInForce(x.oldestHeld()) }()
	var stale []*iface
	for _, ifc := range x.ifaces {
		// An observed interface (the console view) is another instance's.
		if ifc.prog != nil && ifc.rulesGen != x.files.gen && ifc.observer == "" {
			stale = append(stale, ifc)
		}
	}
	if len(stale) == 0 {
		return
	}
	// The instance of this generation: the programs swapped and those
	// attached after share its rule maps.
	rules := x.kernel.in
	fresh := rules == nil || x.kernel.gen != x.files.gen
	if fresh {
		var err error
		if rules, err = bpf.CompileRules(x.policy); err != nil {
			for _, ifc := range stale {
				x.swapFailed(acc, ifc, err)
			}
			return
		}
		x.setInstance(rules)
	}
	olds := make([]ebpf.ProgramID, len(stale))
	errs := make([]error, len(stale))
	swap := func(i int) {
		olds[i] = stale[i].prog.ID()
		errs[i] = stale[i].prog.SwapRules(rules)
	}
	// The first that succeeds fills the maps the others share.
	next := 0
	for next < len(stale) {
		swap(next)
		next++
		if errs[next-1] == nil {
			break
		}
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for range min(runtime.NumCPU(), len(stale)-next) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				swap(i)
			}
		}()
	}
	for i := next; i < len(stale); i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, ifc := range stale {
		if errs[i] != nil {
			x.swapFailed(acc, ifc, errs[i])
			continue
		}
		ifc.rulesGen = x.files.gen
		if ifc.swapErr != nil {
			ifc.swapErr, ifc.reported = nil, "" // a failure again is news
		}
		x.Log.Infof("interface %q: prefix files swapped in, program id %d (was %d)", ifc.name, ifc.prog.ID(), olds[i])
		if note := ifc.prog.PrefixNote(); note != "" {
			x.Log.Warnf("interface %q: %s", ifc.name, note)
		}
	}
}

// swapFailed records why the policy's prefixes are not in force on an
// interface, for its rule points, and reports it once.
func (x *XDPDrop) swapFailed(acc telegraf.Accumulator, ifc *iface, err error) {
	ifc.swapErr = errors.New(firstLine(err))
	x.report(acc, ifc, fmt.Errorf("interface %q: put the changed prefix files in force: %w; the previous prefixes stay in force, tried again at the next gather", ifc.name, err))
}

// oldestHeld is the oldest generation of rule prefixes the program of an
// attached interface holds: the policy's when every program holds it.
func (x *XDPDrop) oldestHeld() uint64 {
	held := x.files.gen
	for _, ifc := range x.ifaces {
		if ifc.prog != nil && ifc.observer == "" {
			held = min(held, ifc.rulesGen)
		}
	}
	return held
}
