//go:build linux

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

type throughputConfig struct {
	trials int
	frames uint32 // per trial
}

type throughputResult struct {
	mode           bpf.Mode
	frame          string
	what           string  // for the rules' trial: what the rules do with the frame
	target         bool    // for the rules' trial: the case the target is for
	ours, bare     float64 // median Mpps per CPU-second of the sending core
	ratio          float64 // median over trials of ours / bare in the same trial
	oursWall       float64 // median Mpps over wall time
	bareWall       float64
	ratioWall      float64
	trials         int
	framesPerTrial uint32
	sender         string // the transport that sent the frames
	live           bool   // sent by live frames: the ratio is the program's
	refused        string // not live: why
}

// throughput sends frames from the peer of a veth with live-frames
// BPF_PROG_TEST_RUN (XDP_TX), so that the veth's NAPI receives them and runs
// the program attached to it; the bare program and ours (drop all) take turns
// on the same veth, trial by trial. The sending thread also runs the
// receiving NAPI (the softirq raised by the transmit runs when the sender
// re-enables bottom halves), so frames over that thread's CPU time is the
// throughput of one core doing both; frames over wall time is shown beside it.
// Where live frames are refused, AF_PACKET sends instead, with fewer frames
// a trial: its rows are printed, but their ratio is the sender's.
func throughput(e *env, cfg throughputConfig) ([]throughputResult, []string, error) {
	gen, bare, done, err := throughputPrograms(e)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	ours, err := bpf.Load(bpf.Policy{DropAll: true})
	if err != nil {
		return nil, nil, err
	}
	defer ours.Close()

	frame := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	var results []throughputResult
	var notes []string
	for _, mode := range []bpf.Mode{bpf.ModeNative, bpf.ModeGeneric} {
		flags := link.XDPDriverMode
		if mode == bpf.ModeGeneric {
			// Without a native program the veth runs NAPI, and so takes
			// XDP_TX frames from its peer, only with GRO on.
			if err := e.ns.EnableGRO(testns.Dev); err != nil {
				return nil, nil, err
			}
			flags = link.XDPGenericMode
		}
		r, err := e.againstBare(gen, bare, ours, flags, frame, cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("%s mode: %w", mode, err)
		}
		r.mode = mode
		results = append(results, r)
	}
	notes = append(notes, "throughput checked: in every trial the veth's rx_packets grew by exactly the frames sent, and in every trial of ours the counters grew by exactly as much (frames sent by "+gen.String()+")")
	return results, notes, nil
}

// throughputPrograms makes the traffic generator and loads the bare
// program; done closes them.
func throughputPrograms(e *env) (gen *sender, bare *ebpf.Program, done func(), err error) {
	gen, err = e.newSender()
	if err != nil {
		return nil, nil, nil, err
	}
	bare, err = loadReturn("xdp_bare_drop", xdpDrop)
	if err != nil {
		gen.Close()
		return nil, nil, nil, err
	}
	return gen, bare, func() { bare.Close(); gen.Close() }, nil
}

// againstBare runs cfg.trials trials of frame, bare and ours taking turns
// on the same veth (the order reversed every other trial), and returns the
// medians and the median of the ratios of the same trial.
func (e *env) againstBare(gen *sender, bare *ebpf.Program, ours *bpf.Program, flags link.XDPAttachFlags, frame []byte, cfg throughputConfig) (throughputResult, error) {
	n := gen.scaled(cfg.frames)
	var oursPPS, barePPS, oursWall, bareWall, ratio, ratioWall []float64
	for t := 0; t < cfg.trials; t++ {
		order := []bool{false, true} // false: bare, true: ours
		if t%2 == 1 {
			order = []bool{true, false}
		}
		var pps, wall [2]float64
		for _, isOurs := range order {
			prog, o := bare, (*bpf.Program)(nil)
			if isOurs {
				prog, o = ours.XDP(), ours
			}
			var tr trialResult
			var err error
			for tries := 0; ; tries++ {
				tr, err = e.throughputTrial(gen, prog, o, flags, frame, n)
				if !errors.Is(err, errInterrupted) || tries == 5 {
					break
				}
			}
			if err != nil {
				return throughputResult{}, fmt.Errorf("trial %d: %w", t, err)
			}
			i := 0
			if isOurs {
				i = 1
			}
			pps[i], wall[i] = tr.mpps, tr.mppsWall
		}
		barePPS, oursPPS = append(barePPS, pps[0]), append(oursPPS, pps[1])
		bareWall, oursWall = append(bareWall, wall[0]), append(oursWall, wall[1])
		ratio = append(ratio, pps[1]/pps[0])
		ratioWall = append(ratioWall, wall[1]/wall[0])
	}
	return throughputResult{
		frame: fmt.Sprintf("IPv4/UDP %d B", len(frame)),
		ours:  median(oursPPS), bare: median(barePPS), ratio: median(ratio),
		oursWall: median(oursWall), bareWall: median(bareWall), ratioWall: median(ratioWall),
		trials: cfg.trials, framesPerTrial: n,
		sender: gen.String(), live: gen.isLive(), refused: gen.refused,
	}, nil
}

type trialResult struct {
	mpps, mppsWall float64
}

// throughputTrial attaches prog to the receiving veth, sends n frames from
// its peer and checks that they all arrived and, for ours, were all counted.
// An interrupted send returns errInterrupted once the receiver is quiet.
func (e *env) throughputTrial(gen *sender, prog *ebpf.Program, ours *bpf.Program, flags link.XDPAttachFlags, frame []byte, n uint32) (trialResult, error) {
	l, err := e.attach(prog, testns.Dev, flags)
	if err != nil {
		return trialResult{}, err
	}
	defer l.Close()
	counted0, err := totalPackets(ours)
	if err != nil {
		return trialResult{}, err
	}
	rx0, err := e.ns.RxPackets(testns.Dev)
	if err != nil {
		return trialResult{}, err
	}
	var tr testRun
	sendErr := e.ns.Do(func() error {
		var err error
		tr, err = gen.run(frame, n, e.ns.PeerIdx)
		return err
	})
	// Let the receiver finish, also when a signal cut the run short: the
	// next trial starts from quiet counters.
	rx1, err := e.waitRx(rx0)
	if sendErr != nil {
		return trialResult{}, sendErr
	}
	if err != nil {
		return trialResult{}, err
	}
	received := rx1 - rx0
	if ours != nil {
		counted1, err := totalPackets(ours)
		if err != nil {
			return trialResult{}, err
		}
		if counted := counted1 - counted0; counted != received {
			return trialResult{}, fmt.Errorf("counters grew by %d, the veth received %d of %d frames sent", counted, received, n)
		}
	}
	if received != uint64(n) {
		return trialResult{}, fmt.Errorf("sent %d frames, the veth received %d", n, received)
	}
	return trialResult{
		mpps:     float64(n) / tr.cpu.Seconds() / 1e6,
		mppsWall: float64(n) / tr.wall.Seconds() / 1e6,
	}, nil
}

// waitRx polls the receiving veth's rx_packets until it has not moved for
// 20 ms, and returns it.
func (e *env) waitRx(from uint64) (uint64, error) { return e.waitRxOf(testns.Dev, from) }

func (e *env) waitRxOf(dev string, from uint64) (uint64, error) {
	last, still := from, 0
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		rx, err := e.ns.RxPackets(dev)
		if err != nil {
			return 0, err
		}
		if rx == last {
			still++
			if still == 4 {
				return rx, nil
			}
			continue
		}
		last, still = rx, 0
	}
	return 0, fmt.Errorf("%s still receiving after 5s", dev)
}

// totalPackets sums the packet counters of all classes; 0 for no program.
func totalPackets(p *bpf.Program) (uint64, error) {
	if p == nil {
		return 0, nil
	}
	var c bpf.Counters
	if err := p.ReadCounters(&c); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range c {
		n += v.Packets
	}
	return n, nil
}
