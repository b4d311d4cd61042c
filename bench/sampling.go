//go:build linux

package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// beforeSamplingObject is the compiled object of the program before
// sampling, a fixed baseline taken as is from the last commit before it:
//
//	git show c9fcf1d:bpf/xdpdrop_bpfel.o > bench/testdata/before-sampling.o
//
//go:embed testdata/before-sampling.o
var beforeSamplingObject []byte

// loadBeforeSampling loads the program before sampling, without rules,
// dropping every frame.
func loadBeforeSampling() (*ebpf.Program, error) {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(beforeSamplingObject))
	if err != nil {
		return nil, fmt.Errorf("program before sampling: %w", err)
	}
	v, ok := spec.Variables["verdicts"]
	if !ok || v.Size() != uint32(bpf.ClassCount) {
		return nil, fmt.Errorf("program before sampling: its verdict table does not have the %d classes of this build", bpf.ClassCount)
	}
	var verdicts [bpf.ClassCount]uint8
	for c := range verdicts {
		verdicts[c] = uint8(bpf.ActionDrop) | 2 // VERDICT_DROP
	}
	if err := v.Set(verdicts); err != nil {
		return nil, fmt.Errorf("program before sampling: set verdicts: %w", err)
	}
	var objs struct {
		Prog     *ebpf.Program `ebpf:"xdp_drop"`
		Counters *ebpf.Map     `ebpf:"counters"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("program before sampling: %w", err)
	}
	objs.Counters.Close() // the program holds its own reference
	return objs.Prog, nil
}

// samplingResult is one paired comparison of the sampling section.
type samplingResult struct {
	name, base string
	frame      string
	ours, bare float64 // medians, ns per frame
	delta      float64 // median over rounds of ours - base in the same round
	q1, q3     float64
	target     float64 // the most delta may be; NaN: within the noise (half the IQR)
}

func (r samplingResult) met() bool {
	if math.IsNaN(r.target) {
		return r.delta >= -(r.q3-r.q1)/2 && r.delta <= (r.q3-r.q1)/2
	}
	return r.delta <= r.target
}

// samplingRate is the rate the per-packet row measures.
const samplingRate = 1000

// samplingPerPacket measures, paired round by round, the program with
// sample_rate = 0 against the program before sampling, and sample_rate =
// 1000 against sample_rate = 0, all dropping every frame. The samples are
// read and discarded meanwhile, as the plugin reads them.
func samplingPerPacket(cfg perPacketConfig) ([]samplingResult, []string, error) {
	sampling := bpf.Policy{DropAll: true, Sample: bpf.Sampling{
		Rate: samplingRate, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true},
		MaxPerSecond: xdp_drop.DefaultSampleMaxPerSecond, Snaplen: xdp_drop.DefaultCaptureSnaplen,
	}}
	names := []string{"before sampling", "sample_rate = 0", "sample_rate = " + strconv.Itoa(samplingRate)}
	progs := make([][]*ebpf.Program, len(names))
	var ours []*bpf.Program
	var readers []*bpf.SampleReader
	var wg sync.WaitGroup
	var read atomic.Uint64
	defer func() {
		for _, r := range readers {
			r.Close()
		}
		wg.Wait()
		for _, p := range progs[0] {
			p.Close()
		}
		for _, p := range ours {
			p.Close()
		}
	}()
	for c := 0; c < cfg.copies; c++ {
		old, err := loadBeforeSampling()
		if err != nil {
			return nil, nil, err
		}
		progs[0] = append(progs[0], old)
		for i, policy := range []bpf.Policy{{DropAll: true}, sampling} {
			p, err := bpf.Load(policy)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", names[i+1], err)
			}
			ours = append(ours, p)
			progs[i+1] = append(progs[i+1], p.XDP())
			if !policy.Sample.On() {
				continue
			}
			r, err := p.SampleReader()
			if err != nil {
				return nil, nil, err
			}
			readers = append(readers, r)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := r.Read(); err != nil {
						return
					}
					read.Add(1)
				}
			}()
		}
	}
	f := benchFrame{"IPv4/UDP", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18))), bpf.IPv4Class(frames.ProtoUDP), false}
	t, err := timeRounds(names, progs, func(int, int) bool { return true }, []benchFrame{f}, cfg, true)
	if err != nil {
		return nil, nil, err
	}
	for c := range names {
		if t.verdicts[c][0] != xdpDrop {
			return nil, nil, fmt.Errorf("%s: verdict %s, want XDP_DROP", names[c], actionName(t.verdicts[c][0]))
		}
	}
	pair := func(c, base int, target float64) samplingResult {
		deltas := make([]float64, len(t.perFrame[c][0]))
		for r := range deltas {
			deltas[r] = t.perFrame[c][0][r] - t.perFrame[base][0][r]
		}
		q1, q3 := quartiles(deltas)
		return samplingResult{
			name: names[c], base: names[base], frame: f.String(),
			ours: median(t.perFrame[c][0]), bare: median(t.perFrame[base][0]),
			delta: median(deltas), q1: q1, q3: q3, target: target,
		}
	}
	var sent, capped, lost uint64
	for _, p := range ours {
		c, err := p.SampleCounts()
		if err != nil {
			return nil, nil, err
		}
		sent, capped, lost = sent+c.Sent, capped+c.Capped, lost+c.Lost
	}
	runs := uint64(cfg.rounds) * uint64(cfg.repeat)
	note := fmt.Sprintf("sampling: %d frames ran through sample_rate = %d: %d sampled (%.2f per 1000), %d over the cap of %d/s, %d lost; %d read",
		runs, samplingRate, sent+capped+lost, float64(sent+capped+lost)*1000/float64(runs), capped, xdp_drop.DefaultSampleMaxPerSecond, lost, read.Load())
	if want := float64(runs) / samplingRate; float64(sent+capped+lost) < want*0.9 || float64(sent+capped+lost) > want*1.1 {
		return nil, nil, fmt.Errorf("sample_rate = %d sampled %d of %d frames, want about %.0f", samplingRate, sent+capped+lost, runs, want)
	}
	return []samplingResult{pair(1, 0, math.NaN()), pair(2, 1, targetSamplingNs)}, []string{note}, nil
}

// targetSamplingNs is the most sample_rate = 1000 may add per frame.
const targetSamplingNs = 2.0

// samplingFlood is the flood row: sample_rate = 1 on a veth, the plugin
// reading the samples, frames sent as fast as one core can for the given
// time.
type samplingFlood struct {
	frames               uint64
	took                 time.Duration
	sampled, capped      uint64 // as xdp_drop_link reports them
	lost                 uint64
	perSecond            float64 // sampled over the flood's duration
	cap                  int64
	rssKB                int64         // the bench process, plugin included
	gather, gatherLoaded time.Duration // median Gather, idle and after the flood's samples
	sender               string        // the transport that sent the flood
}

func floodSampling(e *env, seconds float64) (samplingFlood, error) {
	r := samplingFlood{cap: xdp_drop.DefaultSampleMaxPerSecond}
	// The sections before leave garbage the heap has not given back yet:
	// return it, so that the RSS below is the plugin's and what is live.
	debug.FreeOSMemory()
	x := xdp_drop.New()
	x.Interfaces, x.Drop, x.Log, x.HandoverTimeout = []string{testns.Dev}, []any{"all"}, quietLogger{}, 0
	x.SampleRate, x.SampleMaxPerSecond = 1, r.cap
	if err := x.Init(); err != nil {
		return r, err
	}
	gen, err := e.newSender()
	if err != nil {
		return r, err
	}
	defer gen.Close()
	r.sender = gen.String()
	acc := &discardAccumulator{}
	err = e.ns.Do(func() error {
		if err := e.ns.CheckAttachable(testns.Dev); err != nil {
			return err
		}
		if err := x.Start(acc); err != nil {
			return err
		}
		defer x.Stop()
		if err := acc.err(); err != nil {
			return err
		}
		timeGather := func(n int) time.Duration {
			var ds []time.Duration
			for i := 0; i < n; i++ {
				start := time.Now()
				_ = x.Gather(acc)
				ds = append(ds, time.Since(start))
			}
			return medianDuration(ds)
		}
		r.gather = timeGather(20)
		frame := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
		chunk := gen.scaled(1 << 20)
		start := time.Now()
		for time.Since(start).Seconds() < seconds {
			if _, err := gen.run(frame, chunk, e.ns.PeerIdx); err != nil && !errors.Is(err, errInterrupted) {
				return err
			}
			r.frames += uint64(chunk)
		}
		r.took = time.Since(start)
		time.Sleep(100 * time.Millisecond) // the reader catches up
		x.Reconcile(acc)
		snap := x.Snapshot(acc)
		if len(snap.Links) != 1 || !snap.Links[0].Sampling {
			return fmt.Errorf("no sampling counters on %s", testns.Dev)
		}
		l := snap.Links[0]
		r.sampled, r.capped, r.lost = l.Sampled, l.SampleCapped, l.SampleLost
		r.gatherLoaded = timeGather(1)
		r.rssKB = rssKB()
		return nil
	})
	r.perSecond = float64(r.sampled) / r.took.Seconds()
	return r, err
}

// rssKB is this process's resident set, in KiB.
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}
