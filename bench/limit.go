//go:build linux

package main

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// Targets of the limit rows, as BENCHMARKS.md states them.
const (
	targetLimitDeltaNs   = 15   // a limit rule over the same rule as drop, 1 source
	targetLimitManyRatio = 2    // 10,000,000 sources against 1 source
	targetLimitLRURatio  = 0.25 // ours against the LRU limiter, 10,000,000 sources
)

// limitSources is how many distinct sources the spoofed rows cycle through.
const limitSources = 10_000_000

// limitBenchTargets are the bench_targets slots: our rule as drop and as
// limit, the LRU baseline without and with its limiter.
const (
	slotDrop = iota
	slotLimit
	slotLRUNone
	slotLRULimit
)

type limitBenchResult struct {
	what       string
	sources    int
	ours, base float64 // median ns per frame
	delta      float64 // median over rounds of ours - base in the same round
	q1, q3     float64
	baseName   string
}

// limitPerPacket runs, through bench_sources (which gives each frame a
// source of its own and tail-calls the program measured, so that the
// front's cost is the same on both sides), a limit rule against the same
// rule with action = "drop": with 1 source and with 10,000,000; and the
// LRU limiter against the same program without it, with 10,000,000.
// Rounds pair the two sides and alternate their order.
func limitPerPacket(cfg perPacketConfig) ([]limitBenchResult, []string, error) {
	rule := bpf.Rule{Name: "dns", Protocols: []uint8{frames.ProtoUDP}, DstPorts: []bpf.PortRange{{Lo: 53, Hi: 53}}}
	drop, limit := rule, rule
	drop.Drop = true
	limit.Limit = &bpf.Limit{Rate: 1000, Burst: 1000, PrefixV4: 32, PrefixV6: 64}
	pDrop, err := bpf.Load(bpf.Policy{Rules: []bpf.Rule{drop}})
	if err != nil {
		return nil, nil, fmt.Errorf("drop rule: %w", err)
	}
	defer pDrop.Close()
	pLimit, err := bpf.Load(bpf.Policy{Rules: []bpf.Rule{limit}})
	if err != nil {
		return nil, nil, fmt.Errorf("limit rule: %w", err)
	}
	defer pLimit.Close()
	var objs limitBenchObjects
	if err := loadLimitBenchObjects(&objs, nil); err != nil {
		return nil, nil, fmt.Errorf("load bench/limitbench.c: %w", err)
	}
	defer objs.Close()
	for slot, prog := range map[uint32]*ebpf.Program{slotDrop: pDrop.XDP(), slotLimit: pLimit.XDP(), slotLRUNone: objs.LruNone, slotLRULimit: objs.LruLimit} {
		if err := objs.BenchTargets.Update(slot, prog, ebpf.UpdateAny); err != nil {
			return nil, nil, fmt.Errorf("tail call slot %d: %w", slot, err)
		}
	}
	frame := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 53)),
		netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("198.51.100.53")))
	pairs := []struct {
		what, baseName   string
		sources          int
		ours, base       uint32
		oursVerdictCheck bool
	}{
		{"limit rule, 1 source", "same rule as drop", 1, slotLimit, slotDrop, true},
		{"limit rule, 10,000,000 sources", "same rule as drop", limitSources, slotLimit, slotDrop, true},
		{"LRU limiter (entry per source), 10,000,000 sources", "same program without limiter", limitSources, slotLRULimit, slotLRUNone, false},
	}
	run := func(sources int, slot uint32) (float64, error) {
		// One source: the frame's own, left as it is.
		n := uint64(sources)
		if sources == 1 {
			n = 0
		}
		if err := objs.BenchConfig.Update(uint32(0), limitBenchBenchCfg{Sources: n, Target: slot}, ebpf.UpdateAny); err != nil {
			return 0, err
		}
		tr, _, err := runRetrying(objs.BenchSources, frame, cfg.repeat)
		if err != nil {
			return 0, err
		}
		if tr.retval != xdpDrop && tr.retval != xdpPass {
			return 0, fmt.Errorf("slot %d returned %s: the tail call failed", slot, actionName(tr.retval))
		}
		return float64(tr.cpu.Nanoseconds()) / float64(cfg.repeat), nil
	}
	ours := make([][]float64, len(pairs))
	base := make([][]float64, len(pairs))
	err = onLockedThread(func() error {
		for r := 0; r < cfg.rounds; r++ {
			for i, p := range pairs {
				slots := []uint32{p.base, p.ours}
				if r%2 == 1 {
					slots = []uint32{p.ours, p.base}
				}
				for _, s := range slots {
					ns, err := run(p.sources, s)
					if err != nil {
						return fmt.Errorf("%s: %w", p.what, err)
					}
					if s == p.ours {
						ours[i] = append(ours[i], ns)
					} else {
						base[i] = append(base[i], ns)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var results []limitBenchResult
	for i, p := range pairs {
		deltas := make([]float64, cfg.rounds)
		for r := range deltas {
			deltas[r] = ours[i][r] - base[i][r]
		}
		q1, q3 := quartiles(deltas)
		results = append(results, limitBenchResult{what: p.what, sources: p.sources, baseName: p.baseName,
			ours: median(ours[i]), base: median(base[i]), delta: median(deltas), q1: q1, q3: q3})
	}
	var b bpf.Block
	if err := pLimit.ReadBlock(&b); err != nil {
		return nil, nil, err
	}
	lruInfo, err := objs.LruSources.Info()
	if err != nil {
		return nil, nil, err
	}
	lruMem, _ := lruInfo.Memlock()
	limitMem, err := pLimit.RuleMemory()
	if err != nil {
		return nil, nil, err
	}
	notes := []string{
		fmt.Sprintf("limit rule checked: it decided %d frames, passed %d within budget and limited %d; frames per side and round %d", b.Rule[0].Packets, b.Rule[0].Packets-b.Limited[0].Packets, b.Limited[0].Packets, cfg.repeat),
		fmt.Sprintf("memory: the limiter's cells %.1f MiB (bpf.LimitMemory, %d rows × %d cells × 8 B and the per-rule cells), the rule maps with them %.1f MiB as the kernel accounts them; the LRU baseline's map (2^20 entries) %.1f MiB",
			float64(bpf.LimitMemory)/(1<<20), bpf.LimitRows, bpf.LimitCols, float64(limitMem)/(1<<20), float64(lruMem)/(1<<20)),
	}
	return results, notes, nil
}

func (r *report) printLimit(w io.Writer) {
	var one, many, lru float64
	for _, p := range r.limit {
		switch {
		case p.what == "limit rule, 1 source":
			one = p.delta
		case p.sources == limitSources && p.baseName == "same rule as drop":
			many = p.delta
		default:
			lru = p.delta
		}
	}
	for _, p := range r.limit {
		target, ok := "—", "—"
		switch {
		case p.what == "limit rule, 1 source":
			target = fmt.Sprintf("≤ +%d ns", targetLimitDeltaNs)
			ok = met(p.delta <= targetLimitDeltaNs, fmt.Sprintf("%+.2f ns over", p.delta-targetLimitDeltaNs))
		case p.baseName == "same rule as drop":
			target = fmt.Sprintf("≤ %g × 1 source (%.2f ns); ≤ %.2f × LRU (%.2f ns)", float64(targetLimitManyRatio), targetLimitManyRatio*one, targetLimitLRURatio, targetLimitLRURatio*lru)
			ok = met(many <= targetLimitManyRatio*one && many <= targetLimitLRURatio*lru,
				fmt.Sprintf("%.2f × 1 source, %.2f × LRU", many/one, many/lru))
		}
		fmt.Fprintf(w, "| per-packet, %s | IPv4/UDP to port 53 | %.2f ns | %s %.2f ns | %+.2f ns (IQR %+.2f…%+.2f) | %s | %s |\n",
			p.what, p.ours, p.baseName, p.base, p.delta, p.q1, p.q3, target, ok)
	}
}
