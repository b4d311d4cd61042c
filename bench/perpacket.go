//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// benchFrame is a frame the per-packet benchmark runs, with the class the
// program must count it under.
type benchFrame struct {
	name  string
	frame []byte
	class bpf.Class
	jumbo bool // longer than one buffer: run only by bare and the multi-buffer program
}

func (f benchFrame) String() string { return fmt.Sprintf("%s %d B", f.name, len(f.frame)) }

func perPacketFrames() []benchFrame {
	return []benchFrame{
		{"IPv4/UDP", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18))),
			bpf.IPv4Class(frames.ProtoUDP), false},
		// Every IPv6 extension header is at least 8 bytes: with a whole
		// 20-byte TCP header behind it the frame is 82 bytes.
		{"IPv6/TCP + hop-by-hop", frames.Ether(frames.EtherIPv6, frames.IPv6(frames.ProtoHopOpts,
			frames.Ext(frames.ProtoHopOpts, frames.ProtoTCP, 8, frames.TCP(0)))),
			bpf.IPv6Class(frames.ProtoTCP), false},
		{"QinQ IPv4/UDP", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)),
			frames.Tag{TPID: frames.Ether8021AD, VID: 200}, frames.Tag{TPID: frames.Ether8021Q, VID: 100}),
			bpf.IPv4Class(frames.ProtoUDP), false},
		// A 9000-byte MTU frame: test_run passes what does not fit in the
		// first buffer (3520 B on 4 KiB pages) as fragments.
		{"IPv4/UDP", frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(9014-42))),
			bpf.IPv4Class(frames.ProtoUDP), true},
	}
}

// listDrop is the drop list measured beside drop-all, read by the plugin's
// own parser into listPolicy. IPv6/TCP passes under it.
var listDrop = []string{"udp", "icmp", "gre", "ipv6-icmp"}

var listPolicy = func() bpf.Policy {
	items := make([]any, len(listDrop))
	for i, name := range listDrop {
		items[i] = name
	}
	p, err := xdp_drop.ParseDrop(items)
	if err != nil {
		panic(err)
	}
	return p
}()

var listPolicyName = "drop " + strings.Join(listDrop, ",")

// multiBufferName is drop all with the multi-buffer program, which the
// plugin loads only where a device's MTU needs it.
const multiBufferName = "drop all, multi-buffer program"

type perPacketConfig struct {
	rounds int
	repeat uint32
	copies int // loads of each program, taken in turn round by round
}

// perPacketResult is one frame under one policy of ours, against bare.
type perPacketResult struct {
	frame      string
	policy     string
	ours, bare float64 // median ns per frame
	delta      float64 // median over rounds of ours - bare in the same round
	q1, q3     float64 // quartiles of the paired delta
	copyLo     float64 // lowest and highest median delta of one pair of loads
	copyHi     float64
	kOurs      float64 // median of the kernel's own (whole ns) mean duration
	kBare      float64
	verdict    string
}

// candidate is one program in the per-packet comparison, loaded copies times.
type candidate struct {
	name        string
	progs       []*ebpf.Program
	ours        []*bpf.Program // nil for the bare program
	policy      bpf.Policy
	multiBuffer bool // the multi-buffer (xdp.frags) variant of ours
}

// runs reports whether the candidate runs frame f: jumbo frames only go to
// bare and the multi-buffer program, the only ones that see them whole.
func (c *candidate) runs(f benchFrame) bool {
	return !f.jumbo || c.ours == nil || c.multiBuffer
}

// perPacket runs every frame through the bare program and ours under both
// policies with BPF_PROG_TEST_RUN, round after round, the programs in turn
// (their order reversed every other pass), and times each call with the CPU
// time of the calling thread. Each program is loaded several times and the
// rounds take the loads in turn: where the JIT places a program, and where it
// falls in the XDP dispatcher, moves its cost by up to a nanosecond or two.
func perPacket(e *env, cfg perPacketConfig) ([]perPacketResult, []string, error) {
	cands := []*candidate{
		{name: "bare"},
		{name: "drop all", policy: bpf.Policy{DropAll: true}},
		{name: listPolicyName, policy: listPolicy},
		{name: multiBufferName, policy: bpf.Policy{DropAll: true}, multiBuffer: true},
	}
	var idle []io.Closer
	defer func() {
		// Out of the dispatcher before the next section.
		for _, l := range idle {
			l.Close()
		}
		for _, c := range cands {
			for i, p := range c.progs {
				if c.ours == nil {
					p.Close()
				} else {
					c.ours[i].Close()
				}
			}
		}
	}()
	for i := 0; i < cfg.copies; i++ {
		for _, c := range cands {
			if c.name == "bare" {
				p, err := loadReturn("xdp_bare_drop", xdpDrop)
				if err != nil {
					return nil, nil, err
				}
				c.progs = append(c.progs, p)
			} else {
				p, err := bpf.Load(c.policy)
				if err != nil {
					return nil, nil, err
				}
				c.ours = append(c.ours, p)
				if c.multiBuffer {
					if err := p.UseMultiBuffer(); err != nil {
						return nil, nil, err
					}
				}
				c.progs = append(c.progs, p.XDP())
			}
			l, err := e.keepInDispatcher(c.progs[i])
			if err != nil {
				return nil, nil, err
			}
			idle = append(idle, l)
		}
	}

	fs := perPacketFrames()
	names := make([]string, len(cands))
	progs := make([][]*ebpf.Program, len(cands))
	for c, cand := range cands {
		names[c], progs[c] = cand.name, cand.progs
	}
	t, err := timeRounds(names, progs, func(c, f int) bool { return cands[c].runs(fs[f]) }, fs, cfg, false)
	if err != nil {
		return nil, nil, err
	}
	perFrame, kernel, verdicts, interrupted := t.perFrame, t.kernel, t.verdicts, t.interrupted

	var results []perPacketResult
	for c := 1; c < len(cands); c++ {
		for f, fr := range fs {
			if !cands[c].runs(fr) {
				continue
			}
			pd := paired(perFrame[c][f], perFrame[0][f], cfg.copies)
			res := perPacketResult{
				frame: fr.String(), policy: cands[c].name,
				ours: median(perFrame[c][f]), bare: median(perFrame[0][f]),
				delta: pd.median, q1: pd.q1, q3: pd.q3, copyLo: pd.loadLo, copyHi: pd.loadHi,
				kOurs: median(kernel[c][f]), kBare: median(kernel[0][f]),
				verdict: actionName(verdicts[c][f]),
			}
			results = append(results, res)
		}
	}
	// Every frame must have got its verdict and been counted under its class.
	for c, cand := range cands {
		for f, fr := range fs {
			if !cand.runs(fr) {
				continue
			}
			want := uint32(xdpDrop)
			if cand.ours != nil && !cand.policy.Drops(fr.class) {
				want = xdpPass
			}
			if verdicts[c][f] != want {
				return nil, nil, fmt.Errorf("%s on %s: verdict %s, want %s", cand.name, fr, actionName(verdicts[c][f]), actionName(want))
			}
		}
		for i, p := range cand.ours {
			rounds := cfg.rounds / cfg.copies
			if i < cfg.rounds%cfg.copies {
				rounds++
			}
			var ran []benchFrame
			for _, fr := range fs {
				if cand.runs(fr) {
					ran = append(ran, fr)
				}
			}
			if err := checkPerPacketCounters(cand.name, p, ran, uint64(rounds)*uint64(cfg.repeat), interrupted > 0); err != nil {
				return nil, nil, err
			}
		}
	}
	notes := multiBufferNotes(cands, fs, perFrame)
	check := "counters checked: every run counted exactly under its frame's class, in every load"
	if interrupted > 0 {
		check = fmt.Sprintf("%d runs interrupted by signals and repeated: counters checked as at least the runs made", interrupted)
	}
	return results, append(notes, check), nil
}

// roundTimes is what timeRounds measured: perFrame[c][f][r] is program c's
// CPU ns per frame f in round r, kernel[c][f][r] the kernel's own mean
// (whole ns), verdicts[c][f] what c returned for f.
type roundTimes struct {
	perFrame, kernel [][][]float64
	verdicts         [][]uint32
	interrupted      int     // runs a signal cut short, repeated
	interruptedLoad  [][]int // interruptedLoad[c][load]: how many of them were of that load
}

// timeRounds runs every frame through every program, round after round, the
// programs in turn on each frame, and times each call with the CPU time of
// the calling thread. progs[c] are the loads of program c; round r takes
// load r mod cfg.copies. The order is reversed every other pass over the
// loads and, with rotate, also rotated by one every two passes, so that every
// program takes every place in the turn as often as the others. runs tells
// whether program c runs frame f; names name the programs in errors.
func timeRounds(names []string, progs [][]*ebpf.Program, runs func(c, f int) bool, fs []benchFrame, cfg perPacketConfig, rotate bool) (roundTimes, error) {
	t := roundTimes{
		perFrame:        make([][][]float64, len(progs)),
		kernel:          make([][][]float64, len(progs)),
		verdicts:        make([][]uint32, len(progs)),
		interruptedLoad: make([][]int, len(progs)),
	}
	for c := range progs {
		t.interruptedLoad[c] = make([]int, cfg.copies)
		t.perFrame[c] = make([][]float64, len(fs))
		t.kernel[c] = make([][]float64, len(fs))
		t.verdicts[c] = make([]uint32, len(fs))
	}
	err := onLockedThread(func() error {
		order := make([]int, len(progs))
		for r := 0; r < cfg.rounds; r++ {
			load := r % cfg.copies
			turn(order, r/cfg.copies, rotate)
			for f, fr := range fs {
				for _, c := range order {
					if !runs(c, f) {
						continue
					}
					tr, n, err := runRetrying(progs[c][load], fr.frame, cfg.repeat)
					t.interrupted += n
					t.interruptedLoad[c][load] += n
					if err != nil {
						return fmt.Errorf("%s on %s: %w", names[c], fr, err)
					}
					t.perFrame[c][f] = append(t.perFrame[c][f], float64(tr.cpu.Nanoseconds())/float64(cfg.repeat))
					t.kernel[c][f] = append(t.kernel[c][f], float64(tr.duration.Nanoseconds()))
					t.verdicts[c][f] = tr.retval
				}
			}
		}
		return nil
	})
	return t, err
}

// turn sets order to the order in which the programs take their turn in a
// round of pass (one pass goes once over the loads): 0, 1, 2, ... reversed
// in odd passes and, with rotate, rotated left by pass/2, so that over
// 2 len(order) passes every program takes every place twice, once in each
// direction.
func turn(order []int, pass int, rotate bool) {
	n := len(order)
	k := 0
	if rotate {
		k = (pass / 2) % n
	}
	for i := range order {
		order[i] = (i + k) % n
	}
	if pass%2 == 1 {
		slices.Reverse(order)
	}
}

// pairedDelta is the difference of two programs measured in the same
// rounds: the median over rounds of a - b, its quartiles, and the lowest
// and highest median of the rounds of one load.
type pairedDelta struct {
	median, q1, q3 float64
	loadLo, loadHi float64
}

// paired pairs a and b round by round; round r took load r mod copies.
func paired(a, b []float64, copies int) pairedDelta {
	deltas := make([]float64, len(a))
	perLoad := make([][]float64, copies)
	for r := range deltas {
		deltas[r] = a[r] - b[r]
		perLoad[r%copies] = append(perLoad[r%copies], deltas[r])
	}
	var p pairedDelta
	p.median = median(deltas)
	p.q1, p.q3 = quartiles(deltas)
	for i, d := range perLoad {
		m := median(d)
		if i == 0 || m < p.loadLo {
			p.loadLo = m
		}
		if i == 0 || m > p.loadHi {
			p.loadHi = m
		}
	}
	return p
}

// multiBufferNotes compares the multi-buffer program with the single-buffer
// one under the same policy, round by round: what the plugin saves by
// loading it only where a device needs it.
func multiBufferNotes(cands []*candidate, fs []benchFrame, perFrame [][][]float64) []string {
	var notes []string
	for m, multi := range cands {
		if !multi.multiBuffer {
			continue
		}
		for s, single := range cands {
			if single.ours == nil || single.multiBuffer || !slices.Equal(single.policy.Protocols, multi.policy.Protocols) || single.policy.DropAll != multi.policy.DropAll {
				continue
			}
			for f, fr := range fs {
				if fr.jumbo {
					continue
				}
				deltas := make([]float64, len(perFrame[m][f]))
				for r := range deltas {
					deltas[r] = perFrame[m][f][r] - perFrame[s][f][r]
				}
				q1, q3 := quartiles(deltas)
				notes = append(notes, fmt.Sprintf("multi-buffer − single-buffer program (%s), %s, paired by round: %+.2f ns (IQR %+.2f…%+.2f)",
					single.name, fr, median(deltas), q1, q3))
			}
		}
	}
	return notes
}

// counterReader is a program whose counters can be read: ours, or the
// program before rules.
type counterReader interface {
	ReadCounters(*bpf.Counters) error
}

func checkPerPacketCounters(name string, p counterReader, fs []benchFrame, runs uint64, atLeast bool) error {
	var want bpf.Counters
	for _, fr := range fs {
		want[fr.class].Packets += runs
		want[fr.class].Bytes += runs * uint64(len(fr.frame))
	}
	var got bpf.Counters
	if err := p.ReadCounters(&got); err != nil {
		return err
	}
	for c := range want {
		ok := got[c] == want[c]
		if atLeast {
			ok = got[c].Packets >= want[c].Packets && (want[c].Packets != 0 || got[c].Packets == 0)
		}
		if !ok {
			return fmt.Errorf("%s: class %d counted %+v, want %+v", name, c, got[c], want[c])
		}
	}
	return nil
}

// runRetrying repeats a run the kernel interrupted for a signal; it returns
// how many were interrupted.
func runRetrying(prog *ebpf.Program, frame []byte, repeat uint32) (testRun, int, error) {
	for n := 0; n < 10; n++ {
		tr, err := runXDP(prog, frame, repeat, false, 0, 0)
		if errors.Is(err, errInterrupted) {
			continue
		}
		return tr, n, err
	}
	return testRun{}, 10, errors.New("interrupted ten times in a row")
}

// onLockedThread runs f on a goroutine locked to its OS thread, so that the
// thread CPU time f reads is all its own.
func onLockedThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- f()
	}()
	return <-done
}

func actionName(v uint32) string {
	switch v {
	case xdpDrop:
		return "XDP_DROP"
	case xdpPass:
		return "XDP_PASS"
	case xdpTx:
		return "XDP_TX"
	default:
		return fmt.Sprintf("action %d", v)
	}
}
