//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// kernelSide holds the plugin instance's bpf.Instance, of the policy its
// prefix files gave in generation gen.
type kernelSide struct {
	in  *bpf.Instance
	gen uint64
}

// instance is the kernel side of the plugin instance, whose rule maps the
// programs of all its interfaces share: one per generation of the prefix
// files, made at its first attach or swap.
func (l *links) instance() *bpf.Instance {
	if l.kernel.in == nil || l.kernel.gen != l.files.gen {
		l.setInstance(bpf.NewInstance(l.policy))
	}
	return l.kernel.in
}

// setInstance makes in the instance of the current generation. It goes on
// with the limiter of the one before, whichever route loads its rule maps
// first (an attach or a swap), so that budgets survive every generation;
// the one before is closed: its programs still attached hold their rule maps.
func (l *links) setInstance(in *bpf.Instance) {
	in.ContinueLimits(l.kernel.in)
	if l.kernel.in != nil {
		in.ContinueBans(l.kernel.in)
	}
	l.closeInstance()
	l.kernel = kernelSide{in: in, gen: l.files.gen}
}

func (l *links) closeInstance() {
	if l.kernel.in == nil {
		return
	}
	if err := l.kernel.in.Close(); err != nil {
		l.log.Errorf("release the rule maps: %v", err)
	}
	l.kernel.in = nil
}

// swapPrefixes puts the rule prefixes in force on every attached interface
// whose program holds another set, without a gap (bpf.Program.SwapRules).
// The set is compiled once, into the instance of this generation; the
// first interface fills its rule maps, the others load their programs on
// them, as many at once as there are CPUs (each load is verified apart).
// An interface whose swap fails keeps its set, which its rule points
// report with the error, and is tried again at the next gather.
func (l *links) swapPrefixes(acc telegraf.Accumulator) {
	defer l.files.releaseMemory()
	defer func() { l.files.noteInForce(l.oldestHeld()) }()
	var stale []*iface
	for _, ifc := range l.ifaces {
		// An observed interface (the console view) is another instance's.
		if ifc.prog != nil && ifc.rulesGen != l.files.gen && ifc.observer == "" {
			stale = append(stale, ifc)
		}
	}
	if len(stale) == 0 {
		return
	}
	// The instance of this generation: the programs swapped and those
	// attached after share its rule maps.
	rules := l.kernel.in
	fresh := rules == nil || l.kernel.gen != l.files.gen
	if fresh {
		var err error
		if rules, err = bpf.CompileRules(l.policy); err != nil {
			for _, ifc := range stale {
				l.swapFailed(acc, ifc, err)
			}
			return
		}
		l.setInstance(rules)
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
			l.swapFailed(acc, ifc, errs[i])
			continue
		}
		ifc.rulesGen = l.files.gen
		if ifc.swapErr != nil {
			ifc.swapErr, ifc.reported = nil, "" // a failure again is news
		}
		l.log.Infof("interface %s: prefix files swapped in, program id %d (was %d)", quote.Value(ifc.name), ifc.prog.ID(), olds[i])
		if note := ifc.prog.PrefixNote(); note != "" {
			l.log.Warnf("interface %s: %s", quote.Value(ifc.name), note)
		}
	}
}

// swapFailed records why the policy's prefixes are not in force on an
// interface, for its rule points, and reports it once.
func (l *links) swapFailed(acc telegraf.Accumulator, ifc *iface, err error) {
	ifc.swapErr = errors.New(firstLine(err))
	l.report(acc, ifc, fmt.Errorf("interface %s: put the changed prefix files in force: %w; the previous prefixes stay in force, tried again at the next gather", quote.Value(ifc.name), err))
}

// oldestHeld is the oldest generation of rule prefixes the program of an
// attached interface holds: the policy's when every program holds it.
func (l *links) oldestHeld() uint64 {
	held := l.files.gen
	for _, ifc := range l.ifaces {
		if ifc.prog != nil && ifc.observer == "" {
			held = min(held, ifc.rulesGen)
		}
	}
	return held
}

// banTable is the ban table the programs of the current instance share
// (loaded with its first use); ok is false before an instance exists.
func (l *links) banTable() (table *bpf.BanTable, ok bool, err error) {
	if l.kernel.in == nil {
		return nil, false, nil
	}
	table, err = l.kernel.in.Bans()
	return table, true, err
}

// readBans reads every attached interface's ban counters, for the bans'
// points, and for a console view the bans in force in the maps they share.
func (l *links) readBans() banReads {
	var r banReads
	if !l.policy.Bans.On {
		return r
	}
	for _, ifc := range l.ifaces {
		if ifc.prog == nil {
			continue
		}
		if (l.console.on || l.console.readOnly) && len(r.ifaces) == 0 {
			r.inForce, r.inForceErr = ifc.prog.BansInForce()
		}
		c, err := ifc.prog.BanCounters()
		r.ifaces = append(r.ifaces, banRead{name: ifc.name, counts: c, err: err})
	}
	return r
}
