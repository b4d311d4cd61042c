//go:build linux

package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// The Go benchmarks measure the same things one at a time, for benchstat
// comparisons between two builds (go test -bench . -count 10 ./bench);
// the driver (go run ./bench) pairs them with their baselines in one run.

// testEnv wraps a test namespace like the driver's env.
func testEnv(b *testing.B) *env {
	ns := testns.New(b)
	e := &env{ns: ns}
	b.Cleanup(func() {
		for i := len(e.closers) - 1; i >= 0; i-- {
			e.closers[i].Close()
		}
	})
	return e
}

// BenchmarkPerPacket reports the CPU time per frame of BPF_PROG_TEST_RUN
// for the bare program, ours under both policies, and the program before
// rules under both.
func BenchmarkPerPacket(b *testing.B) {
	e := testEnv(b)
	bare, err := loadReturn("xdp_bare_drop", xdpDrop)
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	type benchProg struct {
		name  string
		prog  *ebpf.Program
		whole bool // sees jumbo frames whole: bare, or the multi-buffer program
	}
	progs := []benchProg{{"bare", bare, true}}
	for _, pol := range []struct {
		name   string
		policy bpf.Policy
		multi  bool
	}{{"drop-all", bpf.Policy{DropAll: true}, false}, {"drop-list", listPolicy, false}, {"drop-all-multi-buffer", bpf.Policy{DropAll: true}, true}} {
		p, err := bpf.Load(pol.policy)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		if pol.multi {
			if err := p.UseMultiBuffer(); err != nil {
				b.Fatal(err)
			}
		}
		progs = append(progs, benchProg{pol.name, p.XDP(), pol.multi})
	}
	// The program before rules, the baseline of the driver's prerules section.
	for _, pol := range []struct {
		name   string
		policy bpf.Policy
	}{{"before-rules-drop-all", bpf.Policy{DropAll: true}}, {"before-rules-drop-list", listPolicy}} {
		p, err := loadBeforeRules(pol.policy)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		progs = append(progs, benchProg{pol.name, p.Prog, false})
	}
	for _, p := range progs {
		if _, err := e.keepInDispatcher(p.prog); err != nil {
			b.Fatal(err)
		}
	}
	const repeat = 1 << 14
	for _, f := range perPacketFrames() {
		for _, p := range progs {
			if f.jumbo && !p.whole {
				continue
			}
			b.Run(fmt.Sprintf("frame=%s_%dB/prog=%s", f.name, len(f.frame), p.name), func(b *testing.B) {
				var cpu time.Duration
				err := onLockedThread(func() error {
					for b.Loop() {
						tr, _, err := runRetrying(p.prog, f.frame, repeat)
						if err != nil {
							return err
						}
						cpu += tr.cpu
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/repeat, "ns/frame")
			})
		}
	}
}

// BenchmarkGather reports one Gather of the plugin with 1, 16 and 64
// attached interfaces that have each seen the traffic mix.
func BenchmarkGather(b *testing.B) {
	e := testEnv(b)
	names, peers, err := e.gatherVeths(64)
	if err != nil {
		b.Fatal(err)
	}
	gen, err := e.newSender()
	if err != nil {
		b.Fatal(err)
	}
	defer gen.Close()
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("ifaces=%d", n), func(b *testing.B) {
			x := xdp_drop.New()
			x.Interfaces, x.Drop, x.Log, x.HandoverTimeout = names[:n], []any{"all"}, quietLogger{}, 0
			if err := x.Init(); err != nil {
				b.Fatal(err)
			}
			acc := &discardAccumulator{}
			err := e.ns.Do(func() error {
				for _, name := range names[:n] {
					if err := e.ns.CheckAttachable(name); err != nil {
						return err
					}
				}
				if err := x.Start(acc); err != nil {
					return err
				}
				defer x.Stop()
				for _, peer := range peers[:n] {
					for _, f := range traffic.Mix() {
						// Only filling counters: a run a signal cut short is simply repeated.
						_, err := gen.run(f.Frame, uint32(f.Count*100), peer)
						for tries := 0; errors.Is(err, errInterrupted) && tries < 10; tries++ {
							_, err = gen.run(f.Frame, uint32(f.Count*100), peer)
						}
						if err != nil {
							return err
						}
					}
				}
				// The gathers run on this thread, inside the namespace, so
				// that a re-attach could only ever find the namespace's veths.
				b.ReportAllocs()
				for b.Loop() {
					_ = x.Gather(acc)
				}
				return acc.err()
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkKeyByKey is the gather baseline: a 256-entry per-CPU array read
// one key at a time, as samples/bpf's xdp1 reads its counters.
func BenchmarkKeyByKey(b *testing.B) {
	testns.RequirePrivileged(b)
	k, err := newKeyByKey()
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.read(); err != nil {
			b.Fatal(err)
		}
	}
}
