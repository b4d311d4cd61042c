//go:build linux

// Command bench measures xdp_drop against baselines measured in the same
// run and prints a markdown table: per-packet cost against a bare
// "return XDP_DROP" program and, without rules, against the program before
// rules, rules against no rules, throughput through a veth pair, the cost of one
// Gather against a key-by-key map read, and the binary's memory and
// attach/detach latency. It needs root, and works only in a network
// namespace of its own (xdpdrop-bench-*), which it deletes at the end.
//
//	go run ./bench            # the whole run, about a minute
//	go run ./bench -quick     # fewer rounds, for a smoke test
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func main() {
	os.Exit(run())
}

type config struct {
	perPacket  perPacketConfig
	preRules   perPacketConfig
	throughput throughputConfig
	gather     gatherConfig
	memory     memoryConfig
	flowSpec   flowSpecConfig
	// prefixSwaps is how many times the prefix file section swaps a
	// 100,000-prefix file in.
	prefixSwaps int
	quick       bool
}

func run() int {
	quick := flag.Bool("quick", false, "fewer rounds and trials: a smoke test, not a measurement")
	only := flag.String("only", "", "run one section: perpacket, prerules, rules, limit, prefixfile, sampling, bans, detect, flowspec, throughput, gather or memory")
	flag.Parse()

	cfg := config{
		perPacket:   perPacketConfig{rounds: 400, repeat: 1 << 14, copies: 4},
		preRules:    perPacketConfig{rounds: 800, repeat: 1 << 14, copies: 4},
		throughput:  throughputConfig{trials: 9, frames: 1 << 21},
		gather:      gatherConfig{ifaces: []int{1, 16, 64}, samples: 300},
		memory:      memoryConfig{trials: 3, gathers: 3},
		prefixSwaps: 9,
		flowSpec:    flowSpecConfig{testRun: perPacketConfig{rounds: 200, repeat: 1 << 14, copies: 2}, trials: 7, frames: 100_000},
		quick:       *quick,
	}
	if *quick {
		cfg.perPacket = perPacketConfig{rounds: 20, repeat: 1 << 12, copies: 2}
		cfg.preRules = perPacketConfig{rounds: 40, repeat: 1 << 12, copies: 2}
		cfg.throughput = throughputConfig{trials: 2, frames: 1 << 17}
		cfg.gather.samples = 30
		cfg.memory.trials = 1
		cfg.prefixSwaps = 3
		cfg.flowSpec = flowSpecConfig{testRun: perPacketConfig{rounds: 10, repeat: 1 << 12, copies: 1}, trials: 2, frames: 10_000}
	}
	switch *only {
	case "", "perpacket", "prerules", "rules", "limit", "prefixfile", "sampling", "bans", "detect", "flowspec", "throughput", "gather", "memory":
	default:
		fmt.Fprintf(os.Stderr, "bench: -only %q: use perpacket, prerules, rules, limit, prefixfile, sampling, bans, detect, flowspec, throughput, gather or memory\n", *only)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN) to create its namespace and attach XDP")
		return 1
	}

	if *only == "" || *only == "flowspec" {
		// Fail before the run, not after the sections before it.
		if _, err := exec.LookPath("nft"); err != nil {
			fmt.Fprintln(os.Stderr, "bench: the flowspec section compares with nftables and needs nft (Debian: apt-get install nftables); without it, run the other sections one by one with -only")
			return 1
		}
	}
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := newEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	// Interrupted or not, detach everything and delete the namespace.
	cleanup := func() {
		if err := e.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: clean up namespace %s: %v\n", e.ns.Name, err)
		}
	}
	rep, err := func() (*report, error) {
		defer cleanup()
		return measure(ctx, e, cfg, *only)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	rep.took = time.Since(start)
	rep.print(os.Stdout)
	return 0
}

func measure(ctx context.Context, e *env, cfg config, only string) (*report, error) {
	rep := &report{machine: describeMachine(), cfg: cfg, namespace: e.ns.Name}
	want := func(section string) bool { return (only == "" || only == section) && ctx.Err() == nil }
	status := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	}
	var err error
	if want("perpacket") {
		status("per-packet cost: %d rounds of %d runs per program and frame, %d loads of each program", cfg.perPacket.rounds, cfg.perPacket.repeat, cfg.perPacket.copies)
		if rep.perPacket, rep.perPacketNotes, err = perPacket(e, cfg.perPacket); err != nil {
			return nil, fmt.Errorf("per-packet: %w", err)
		}
	}
	if want("prerules") {
		c := cfg.preRules
		status("before rules: the program without rules against the program before rules, %d rounds of %d runs per program and frame, %d loads of each program", c.rounds, c.repeat, c.copies)
		if rep.preRules, rep.preRulesNotes, err = preRules(e, c); err != nil {
			return nil, fmt.Errorf("before rules: %w", err)
		}
	}
	if want("rules") {
		rc := cfg.perPacket
		rc.rounds, rc.copies = max(rc.rounds/2, 1), min(rc.copies, 2)
		status("rules: 64 rules with ports, prefixes or both against no rules, %d rounds of %d runs; throughput; start-up with %d prefixes per family", rc.rounds, rc.repeat, bpf.MaxPrefixes)
		if rep.rules, rep.rulesNotes, err = rulesPerPacket(rc); err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		t, err := rulesThroughput(e, cfg.throughput)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		rep.rulesThroughput = t
		s, err := rulesStartup()
		if err != nil {
			return nil, fmt.Errorf("rules start-up: %w", err)
		}
		rep.rulesStartup = &s
	}
	if want("limit") {
		lc := cfg.perPacket
		lc.rounds = max(lc.rounds/2, 1)
		status("limit: a limit rule against the same rule as drop, 1 and %d sources, and an LRU limiter, %d rounds of %d runs", limitSources, lc.rounds, lc.repeat)
		if rep.limit, rep.limitNotes, err = limitPerPacket(lc); err != nil {
			return nil, fmt.Errorf("limit: %w", err)
		}
	}
	if want("prefixfile") {
		status("prefix files: %d prefixes swapped in %d times through the plugin, on 1 and 8 interfaces", prefixFileBenchPrefixes, cfg.prefixSwaps)
		for _, n := range []int{1, 8} {
			r, err := prefixFileSwap(e, cfg.prefixSwaps, n)
			if err != nil {
				return nil, fmt.Errorf("prefix files, %d interfaces: %w", n, err)
			}
			rep.prefixFile = append(rep.prefixFile, r)
		}
	}
	if want("sampling") {
		sc := cfg.perPacket
		status("sampling: sample_rate = 0 against the program before sampling, 1000 against 0, %d rounds of %d runs; a flood with sample_rate = 1", sc.rounds, sc.repeat)
		if rep.sampling, rep.samplingNotes, err = samplingPerPacket(sc); err != nil {
			return nil, fmt.Errorf("sampling: %w", err)
		}
		f, err := floodSampling(e, 2)
		if err != nil {
			return nil, fmt.Errorf("sampling flood: %w", err)
		}
		rep.flood = &f
	}
	if want("bans") {
		bc := cfg.perPacket
		bc.rounds = max(bc.rounds/2, 1)
		status("bans: %d bans in force against none, %d rounds of %d runs; %d bans applied and lifted", banBenchCount, bc.rounds, bc.repeat, banBenchDelta)
		if rep.bans, rep.banApply, rep.bansNotes, err = bansPerPacket(bc, cfg.quick); err != nil {
			return nil, fmt.Errorf("bans: %w", err)
		}
		status("bans: a cold start's sync of %d decisions from a feed", banSyncCount)
		s, err := bansStartupSync(e)
		if err != nil {
			return nil, fmt.Errorf("bans: %w", err)
		}
		rep.banSync = &s
	}
	if want("detect") {
		runs := detectRuns
		if cfg.quick {
			runs = 2
		}
		status("detect: [bans.detect] pps = %d, for = %s, sample_rate = %d; %d runs of one source at 10× pps, %d sources at half of it throughout; the detector's cost per sample", detectPPS, detectFor, detectSampleRate, runs, detectBackground)
		d, err := detectTimeToBan(e, runs)
		if err != nil {
			return nil, fmt.Errorf("detect: %w", err)
		}
		rep.detect = &d
	}
	if want("flowspec") {
		fc := cfg.flowSpec
		status("flowspec: the engine with 0, 64 and %d rules against bare, %d rounds of %d runs; through the stack against the same rules as nftables rules, %d trials of %d frames", bpf.FlowMaxRules, fc.testRun.rounds, fc.testRun.repeat, fc.trials, fc.frames)
		rows, notes, err := flowTestRun(e, fc.testRun)
		if err != nil {
			return nil, fmt.Errorf("flowspec: %w", err)
		}
		rep.flowTestRun, rep.flowSpecNotes = rows, notes
		stack, notes, err := flowStack(e, fc)
		if err != nil {
			return nil, fmt.Errorf("flowspec through the stack: %w", err)
		}
		rep.flowStack, rep.flowSpecNotes = stack, append(rep.flowSpecNotes, notes...)
	}
	if want("throughput") {
		status("throughput: %d trials of %d frames per program and mode", cfg.throughput.trials, cfg.throughput.frames)
		if rep.throughput, rep.throughputNotes, err = throughput(e, cfg.throughput); err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
	}
	var names []string
	var peers []int
	if want("gather") || want("memory") {
		if names, peers, err = e.gatherVeths(64); err != nil {
			return nil, err
		}
	}
	if want("gather") {
		status("gather: %v interfaces", cfg.gather.ifaces)
		if rep.gather, err = gather(e, cfg.gather, names, peers); err != nil {
			return nil, fmt.Errorf("gather: %w", err)
		}
	}
	if want("memory") {
		status("memory and latency: the binary on %d interfaces, %d trials", len(names), cfg.memory.trials)
		dir, err := os.MkdirTemp("", "xdpdrop-bench")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		bin, err := buildBinary(dir)
		if err != nil {
			return nil, err
		}
		status("kernel memory: 64 rules, %d prefixes per family, on 1 and %d interfaces", kernelMemPrefixes, len(names))
		k, err := kernelMemory(e, names)
		if err != nil {
			return nil, fmt.Errorf("kernel memory: %w", err)
		}
		rep.kernelMem = &k
		for _, n := range []int{1, len(names)} {
			m, err := memory(e, cfg.memory, bin, names[:n])
			if err != nil {
				return nil, fmt.Errorf("memory, %d interfaces: %w", n, err)
			}
			rep.memory = append(rep.memory, m)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted")
	}
	return rep, nil
}
