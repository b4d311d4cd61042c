//go:build linux

package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"

	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

type gatherConfig struct {
	ifaces  []int // interface counts to measure
	samples int   // timed gathers per count
}

type gatherResult struct {
	ifaces       int
	classes      int     // classes with traffic per interface
	micros       float64 // median µs per gather
	allocs       float64 // allocations per gather
	allocsIdle   float64 // before any traffic: link points only
	allocsMore   float64 // after twice the traffic
	points       int     // points per gather
	baseline     float64 // key-by-key read of a 256-entry per-CPU array, median µs
	baseAllocs   float64
	baselineKeys int
	sender       string // the transport that sent the traffic
}

// gatherVeths creates n veth pairs (xdpbgN / xdpbgNp) for the plugin.
func (e *env) gatherVeths(n int) (names []string, peers []int, err error) {
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("xdpbg%d", i)
		_, peer, err := e.ns.AddVeth(name, name+"p")
		if err != nil {
			return nil, nil, err
		}
		names = append(names, name)
		peers = append(peers, peer)
	}
	return names, peers, nil
}

// gather measures one Gather of the plugin with n attached interfaces, each
// of which has seen the traffic mix, and the key-by-key baseline.
func gather(e *env, cfg gatherConfig, names []string, peers []int) ([]gatherResult, error) {
	gen, err := e.newSender()
	if err != nil {
		return nil, err
	}
	defer gen.Close()
	baseline, err := newKeyByKey()
	if err != nil {
		return nil, err
	}
	defer baseline.Close()

	var results []gatherResult
	for _, n := range cfg.ifaces {
		r, err := gatherN(e, gen, names[:n], peers[:n], cfg.samples)
		if err != nil {
			return nil, fmt.Errorf("gather with %d interfaces: %w", n, err)
		}
		r.baseline, r.baseAllocs, err = baseline.measure(cfg.samples)
		if err != nil {
			return nil, err
		}
		r.baselineKeys = keyByKeyEntries
		r.sender = gen.String()
		results = append(results, r)
	}
	return results, nil
}

func gatherN(e *env, gen *sender, names []string, peers []int, samples int) (gatherResult, error) {
	r := gatherResult{ifaces: len(names)}
	x := xdp_drop.New()
	x.Interfaces, x.Drop, x.Log, x.HandoverTimeout = names, []any{"all"}, quietLogger{}, 0
	if err := x.Init(); err != nil {
		return r, err
	}
	acc := &discardAccumulator{}
	err := e.ns.Do(func() error {
		// The plugin attaches to what its config names: only this run's veths.
		for _, name := range names {
			if err := e.ns.CheckAttachable(name); err != nil {
				return err
			}
		}
		if err := x.Start(acc); err != nil {
			return err
		}
		defer x.Stop()
		if err := acc.err(); err != nil {
			return err
		}
		gatherOnce := func() { _ = x.Gather(acc) }
		// What a gather emits: a point per series with traffic and per
		// link (the standing series at zero aside).
		count := func() (points int, packets uint64) {
			x.Reconcile(acc)
			snap := x.Snapshot(acc)
			for _, s := range snap.Series {
				packets += s.Packets
				if s.Packets != 0 {
					points++
				}
			}
			return points + len(snap.Links), packets
		}
		r.allocsIdle = testing.AllocsPerRun(20, gatherOnce)

		mix := traffic.Mix()
		send := func(times int) error {
			for i, peer := range peers {
				for _, f := range mix {
					// Every frame is dropped, so none is rewritten by the
					// receiving stack and one call can send them all.
					if err := e.sendAll(gen, f.Frame, f.Count*times, names[i], peer); err != nil {
						return fmt.Errorf("send %s to %s: %w", f.Name, names[i], err)
					}
				}
			}
			return nil
		}
		// A hundred times the mix takes every counter past 255: smaller
		// integers are boxed into the fields map without allocating.
		const times = 100
		if err := send(times); err != nil {
			return err
		}
		want := traffic.Expected(mix)
		for _, c := range want {
			if c.Packets != 0 {
				r.classes++
			}
		}
		if err := waitGathered(count, uint64(traffic.Total(mix)*times*len(names))); err != nil {
			return err
		}
		r.points, _ = count()
		if want := len(names) * (r.classes + 1); r.points != want {
			return fmt.Errorf("a gather emitted %d points, want %d (%d classes and a link point per interface)", r.points, want, r.classes)
		}
		if err := acc.err(); err != nil {
			return err
		}

		micros := make([]float64, samples)
		for i := range micros {
			start := time.Now()
			gatherOnce()
			micros[i] = float64(time.Since(start).Nanoseconds()) / 1e3
		}
		r.micros = median(micros)
		r.allocs = testing.AllocsPerRun(20, gatherOnce)

		if err := send(times); err != nil {
			return err
		}
		if err := waitGathered(count, uint64(traffic.Total(mix)*2*times*len(names))); err != nil {
			return err
		}
		r.allocsMore = testing.AllocsPerRun(20, gatherOnce)
		return acc.err()
	})
	return r, err
}

// sendAll sends count copies of frame from the veth peer to dev, also when
// a signal cuts a send short: what dev received is then taken off. The
// calling thread must be in the namespace.
func (e *env) sendAll(gen *sender, frame []byte, count int, dev string, peer int) error {
	for tries := 0; count > 0; tries++ {
		rx0, err := e.ns.RxPackets(dev)
		if err != nil {
			return err
		}
		_, err = gen.run(frame, uint32(count), peer)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errInterrupted) || tries == 10 {
			return err
		}
		rx1, err := e.waitRxOf(dev, rx0)
		if err != nil {
			return err
		}
		count -= int(rx1 - rx0)
	}
	return nil
}

// waitGathered gathers until the counters add up to want packets: the
// receiving NAPI may still be at work when the sender returns.
func waitGathered(count func() (int, uint64), want uint64) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, packets := count()
		if packets == want {
			return nil
		}
		if packets > want || time.Now().After(deadline) {
			return fmt.Errorf("gathered %d packets, sent %d", packets, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// keyByKeyEntries is the size of samples/bpf xdp1's rxcnt map: one counter
// per IP protocol.
const keyByKeyEntries = 256

// keyByKey is the baseline: a per-CPU array of 256 u64 counters read the way
// samples/bpf's xdp1 reads its own, one lookup per key, summing over CPUs.
type keyByKey struct {
	m      *ebpf.Map
	values []uint64
}

func newKeyByKey() (*keyByKey, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "bench_rxcnt", Type: ebpf.PerCPUArray,
		KeySize: 4, ValueSize: 8, MaxEntries: keyByKeyEntries,
	})
	if err != nil {
		return nil, fmt.Errorf("create baseline map: %w", err)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		m.Close()
		return nil, err
	}
	return &keyByKey{m: m, values: make([]uint64, cpus)}, nil
}

func (k *keyByKey) Close() error { return k.m.Close() }

func (k *keyByKey) read() (uint64, error) {
	var total uint64
	for key := uint32(0); key < keyByKeyEntries; key++ {
		if err := k.m.Lookup(key, k.values); err != nil {
			return 0, err
		}
		var sum uint64
		for _, v := range k.values {
			sum += v
		}
		total += sum
	}
	return total, nil
}

// measure returns the median µs of a whole read and its allocations.
func (k *keyByKey) measure(samples int) (float64, float64, error) {
	var err error
	once := func() {
		if _, e := k.read(); e != nil {
			err = e
		}
	}
	for i := 0; i < 10; i++ {
		once()
	}
	times := make([]float64, samples)
	for i := range times {
		start := time.Now()
		once()
		times[i] = float64(time.Since(start).Nanoseconds()) / 1e3
	}
	allocs := testing.AllocsPerRun(20, once)
	return median(times), allocs, err
}

// discardAccumulator drops every point, so that the allocations measured
// are the plugin's own (Telegraf's accumulator builds a metric from every
// point as well), and keeps the errors.
type discardAccumulator struct {
	testutil.NopAccumulator
	errs []error
}

func (a *discardAccumulator) AddError(err error) { a.errs = append(a.errs, err) }

func (a *discardAccumulator) err() error {
	if len(a.errs) == 0 {
		return nil
	}
	return fmt.Errorf("plugin reported: %w", a.errs[0])
}

// quietLogger discards the plugin's logs.
type quietLogger struct{}

func (quietLogger) Level() telegraf.LogLevel { return telegraf.Error }
func (quietLogger) AddAttribute(string, any) {}
func (quietLogger) Errorf(string, ...any)    {}
func (quietLogger) Error(...any)             {}
func (quietLogger) Warnf(string, ...any)     {}
func (quietLogger) Warn(...any)              {}
func (quietLogger) Infof(string, ...any)     {}
func (quietLogger) Info(...any)              {}
func (quietLogger) Debugf(string, ...any)    {}
func (quietLogger) Debug(...any)             {}
func (quietLogger) Tracef(string, ...any)    {}
func (quietLogger) Trace(...any)             {}
