//go:build linux

package xdp_drop

import (
	"fmt"
	"os"
	"syscall"

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
// An interface whose swap fails keeps its set, and is tried again at the
// next gather.
func (x *XDPDrop) swapPrefixes(acc telegraf.Accumulator) {
	defer x.releaseMemory()
	var rules *bpf.Rules // compiled once for every interface
	for _, ifc := range x.ifaces {
		if ifc.prog == nil || ifc.rulesGen == x.files.gen || ifc.observer != "" {
			continue // observed (the console view): another instance's to swap
		}
		if rules == nil {
			var err error
			if rules, err = bpf.CompileRules(x.policy); err != nil {
				acc.AddError(fmt.Errorf("put the changed prefix files in force: %w; the previous prefixes stay in force", err))
				return
			}
			defer rules.Close()
		}
		old := ifc.prog.ID()
		if err := ifc.prog.SwapRules(rules); err != nil {
			x.report(acc, ifc, fmt.Errorf("interface %q: put the changed prefix files in force: %w; the previous prefixes stay in force, tried again at the next gather", ifc.name, err))
			continue
		}
		ifc.rulesGen = x.files.gen
		x.Log.Infof("interface %q: prefix files swapped in, program id %d (was %d)", ifc.name, ifc.prog.ID(), old)
		if note := ifc.prog.PrefixNote(); note != "" {
			x.Log.Warnf("interface %q: %s", ifc.name, note)
		}
	}
}
