//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// Targets, as BENCHMARKS.md states them.
const (
	targetDeltaNs     = 1.5  // per-packet paired delta over bare
	targetNativeRatio = 0.97 // live native throughput against bare
	targetGatherRatio = 0.05 // one-interface gather against the key-by-key read
	targetPeakRSS     = 25e6 // bytes, with 64 interfaces
	targetDetach      = 5 * time.Second
)

type report struct {
	machine         string
	namespace       string
	cfg             config
	perPacket       []perPacketResult
	perPacketNotes  []string
	preRules        []preRulesResult
	preRulesNotes   []string
	throughput      []throughputResult
	throughputNotes []string
	gather          []gatherResult
	rules           []ruleBenchResult
	rulesNotes      []string
	rulesThroughput []throughputResult
	rulesStartup    *ruleStartup
	limit           []limitBenchResult
	limitNotes      []string
	sampling        []samplingResult
	samplingNotes   []string
	flood           *samplingFlood
	bans            []samplingResult
	banApply        banApply
	banSync         *banSync
	bansNotes       []string
	detect          *detectResult
	flowTestRun     []flowTestRunRow
	flowStack       []flowStackRow
	flowSpecNotes   []string
	prefixFile      []prefixFileResult // 1 interface, then 8
	memory          []memoryResult     // 1 interface, then 64
	kernelMem       *kernelMemResult
	took            time.Duration
}

func describeMachine() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	virt := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && strings.Contains(string(b), " hypervisor") {
		virt = ", virtual machine"
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			load = fmt.Sprintf("; load average at start %s %s %s", f[0], f[1], f[2])
		}
	}
	ebpfVersion := "?"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cilium/ebpf" {
				ebpfVersion = d.Version
			}
		}
	}
	return fmt.Sprintf("Linux %s %s, %s × %d CPUs%s; %s, cilium/ebpf %s%s",
		unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:]),
		model, runtime.NumCPU(), virt, runtime.Version(), ebpfVersion, load)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "Machine: %s.\n\n", r.machine)
	fmt.Fprintln(w, "| Measure | Case | xdp_drop | Baseline (same run) | xdp_drop vs baseline | Target | Met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, p := range r.perPacket {
		fmt.Fprintf(w, "| per-packet, %s | %s (%s) | %.2f ns | bare %.2f ns | %+.2f ns (IQR %+.2f…%+.2f; loads %+.2f…%+.2f) | ≤ +%.1f ns | %s |\n",
			p.policy, p.frame, p.verdict, p.ours, p.bare, p.delta, p.q1, p.q3, p.copyLo, p.copyHi, targetDeltaNs,
			met(p.delta <= targetDeltaNs, fmt.Sprintf("%+.2f ns over", p.delta-targetDeltaNs)))
	}
	for _, p := range r.preRules {
		fmt.Fprintf(w, "| per-packet against before rules, %s | %s (%s) | %.2f ns | before rules %.2f ns | %+.2f ns (IQR %+.2f…%+.2f; loads %+.2f…%+.2f) | within noise: ±%.2f ns | %s |\n",
			p.policy, p.frame, p.verdict, p.ours, p.before, p.delta.median, p.delta.q1, p.delta.q3, p.delta.loadLo, p.delta.loadHi, p.noise(),
			met(p.withinNoise(), fmt.Sprintf("%.2f ns beyond", math.Abs(p.delta.median)-p.noise())))
	}
	r.printRules(w)
	r.printLimit(w)
	r.printSampling(w)
	r.printBans(w)
	r.printDetect(w)
	r.printFlowSpec(w)
	for _, t := range r.throughput {
		target, ok := "—", "—"
		if t.mode == "native" {
			target = fmt.Sprintf("≥ %.2f×", targetNativeRatio)
			ok = met(t.ratio >= targetNativeRatio, fmt.Sprintf("%.3f× short", targetNativeRatio-t.ratio))
		}
		fmt.Fprintf(w, "| throughput, %s XDP, drop all | %s, veth%s | %.2f Mpps/core (wall %.2f) | bare %.2f Mpps/core (wall %.2f) | %.3f× (wall %.3f×) | %s | %s |\n",
			t.mode, t.frame, t.senderCase(), t.ours, t.oursWall, t.bare, t.bareWall, t.ratio, t.ratioWall, target, t.unchecked(ok))
	}
	for _, g := range r.gather {
		// xdp1 keeps one map per program, so N interfaces cost N such reads.
		base := g.baseline * float64(g.ifaces)
		ratio := g.micros / base
		target, ok := "—", "—"
		if g.ifaces == 1 {
			target = fmt.Sprintf("≤ %.2f×", targetGatherRatio)
			ok = met(ratio <= targetGatherRatio, fmt.Sprintf("%.3f× over", ratio-targetGatherRatio))
		}
		baseText := fmt.Sprintf("key-by-key, %d keys: %.1f µs, %.0f allocs", g.baselineKeys, g.baseline, g.baseAllocs)
		if g.ifaces > 1 {
			baseText += fmt.Sprintf("; ×%d maps: %.0f µs", g.ifaces, base)
		}
		fmt.Fprintf(w, "| Gather, %d interface%s | %d classes with traffic each, %d points | %.1f µs, %.0f allocs | %s | %.3f× | %s | %s |\n",
			g.ifaces, plural(g.ifaces), g.classes, g.points, g.micros, g.allocs, baseText, ratio, target, ok)
	}
	for _, g := range r.gather {
		fmt.Fprintf(w, "| Gather allocations, %d interface%s | no traffic / 100× the mix / 200× | %.0f / %.0f / %.0f allocs | — | — | bounded, independent of traffic | %s |\n",
			g.ifaces, plural(g.ifaces), g.allocsIdle, g.allocs, g.allocsMore, met(g.allocs == g.allocsMore, "grows with traffic"))
	}
	if len(r.memory) == 2 {
		one, m := r.memory[0], r.memory[1]
		fmt.Fprintf(w, "| peak RSS of the binary | %d interfaces, %d gathers | %.1f MB (%.1f MiB) | 1 interface: %.1f MB | +%.0f kB per interface | ≤ %.0f MB | %s |\n",
			m.ifaces, m.gathers, float64(m.peakRSS)/1e6, float64(m.peakRSS)/(1<<20), float64(one.peakRSS)/1e6,
			(float64(m.peakRSS)-float64(one.peakRSS))/float64(m.ifaces-1)/1e3, targetPeakRSS/1e6,
			met(float64(m.peakRSS) <= targetPeakRSS, fmt.Sprintf("%.1f MB over", (float64(m.peakRSS)-targetPeakRSS)/1e6)))
		fmt.Fprintf(w, "| start → all attached | %d interfaces | %s | 1 interface: %s | — | — | — |\n", m.ifaces, round(m.attach), round(one.attach))
		fmt.Fprintf(w, "| stdin closed → all detached | %d interfaces | %s (exit %s) | 1 interface: %s | — | < %v (Telegraf's grace period) | %s |\n",
			m.ifaces, round(m.detach), round(m.exit), round(one.detach), targetDetach, met(m.detach < targetDetach, "too slow"))
	}
	if k := r.kernelMem; k != nil {
		ratio := float64(k.many) / float64(k.one)
		own := float64(k.many-k.shared) / float64(k.ifaces)
		fmt.Fprintf(w, "| kernel memory, 64 rules, %d prefixes per family, ports | %d interfaces | %.1f MB: rule maps %.2f MB once, %.1f kB per interface | 1 interface: %.2f MB | %.3f× | ≤ %.1f× | %s |\n",
			k.prefixes, k.ifaces, float64(k.many)/1e6, float64(k.shared)/1e6, own/1e3, float64(k.one)/1e6, ratio, targetKernelMemRatio,
			met(ratio <= targetKernelMemRatio, fmt.Sprintf("%.3f× over: each interface's own program and counters", ratio-targetKernelMemRatio)))
	}
	fmt.Fprintln(w)
	if len(r.perPacket) > 0 {
		fmt.Fprintf(w, "How: per-packet: BPF_PROG_TEST_RUN, %d rounds × %d runs per program and frame, programs in turn (order reversed every other pass), "+
			"each call timed with CLOCK_THREAD_CPUTIME_ID on a locked thread; %d loads of each program taken in turn; median ns/frame, and the median over rounds of ours − bare in the same round "+
			"(loads: the lowest and highest such median of one pair of loads).\n",
			r.cfg.perPacket.rounds, r.cfg.perPacket.repeat, r.cfg.perPacket.copies)
	}
	for _, p := range r.perPacket {
		fmt.Fprintf(w, "  kernel-reported mean (whole ns), %s, %s: ours %.0f, bare %.0f\n", p.policy, p.frame, p.kOurs, p.kBare)
	}
	for _, n := range r.perPacketNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(r.preRules) > 0 {
		c := r.cfg.preRules
		fmt.Fprintf(w, "Before rules: ours without rules against the program before rules (bench/testdata/before-rules.o, the fixed object of commit 7843351) under the same policy, "+
			"and a second set of loads of ours, measured as per-packet is, %d rounds × %d runs, %d loads of each taken in turn, the order also rotated; "+
			"noise = half the IQR of ours (second loads) − ours, paired by round; the target is met when the median of ours − before rules is within ± the noise.\n",
			c.rounds, c.repeat, c.copies)
	}
	for _, n := range r.preRulesNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(r.throughput) > 0 {
		t := r.throughput[0]
		fmt.Fprintf(w, "Throughput: %d trials × %d frames per program and mode, %s from the veth peer; "+
			"Mpps/core = frames over the CPU time of the one thread that sends and, in its softirq, receives them; ratio = median over trials of ours/bare in the same trial.\n",
			t.trials, t.framesPerTrial, t.sender)
		if !t.live {
			fmt.Fprintf(w, "  throughput not checked against its target: %s, so AF_PACKET sent, 1/%d of the frames a trial; it reached %.2f Mframes/s (bare, wall time), "+
				"and its own cost of about %.0f ns of CPU a frame (against the program's tens of ns) dominates each trial, so the ratio measures the sender; the per-packet rows measure the program.\n",
				t.refused, packetSlowdown, t.bareWall, 1e3/t.bare)
		}
	}
	if len(r.rules) > 0 {
		fmt.Fprintf(w, "Rules: the same policy (drop tcp, udp) with and without rules, paired round by round as per-packet is; frames from a source in the last rule's prefixes to a port in its range, so that every lookup is made and the last rule decides.\n")
	}
	for _, n := range r.rulesNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(r.limit) > 0 {
		fmt.Fprintf(w, "Limit: through a front program (bench/limitbench.c) that gives each frame a source of its own (1 source: the frame's) and tail-calls the program measured, paired round by round; "+
			"ours: a limit rule (rate 1000/s, burst 1000, per source) against the same rule with action = \"drop\"; the baseline limiter: an LRU hash entry per source with a 1-s window, against the same program without it.\n")
	}
	for _, n := range r.limitNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	for _, n := range r.throughputNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(r.gather) > 0 {
		fmt.Fprintf(w, "Gather: the plugin's Gather (drop = [\"all\"], native mode) on a thread inside the namespace, after 100× the traffic mix on every interface (sent by %s); "+
			"median of %d timed gathers; allocations with testing.AllocsPerRun; the accumulator discards points. "+
			"Baseline: a 256-entry per-CPU array of u64 read with one Lookup per key, summed over CPUs, as samples/bpf's xdp1 reads its counters; xdp1 has one map per program, so N interfaces cost N reads.\n",
			r.gather[0].sender, r.cfg.gather.samples)
	}
	if len(r.memory) == 2 {
		m := r.memory[1]
		fmt.Fprintf(w, "Memory: the binary (go build -trimpath, as make build) run with ip netns exec in the namespace, gathering on a line on stdin as under execd, %d trial%s; "+
			"peak RSS is the highest VmHWM over them, median %.1f MB; "+
			"attach: from start until netlink shows an XDP program on every interface; detach: from closing stdin until it shows none (handover_timeout = \"0s\"); times are medians; binary %.1f MB.\n",
			m.trials, plural(m.trials), float64(m.rssMedian)/1e6, float64(m.binarySize)/1e6)
	}
	if r.kernelMem != nil {
		fmt.Fprintf(w, "Kernel memory: the plugin in process (drop = [\"udp\"], 64 rules of tcp and udp with a port range each and %d source prefixes per family among them), "+
			"started on 1 interface, then on %d; the memlock the kernel accounts to the XDP program on each interface and to every map those programs use, each map once; "+
			"the maps more than one program uses are the shared rule maps, the rest (program, policy table, counters, rule counters; the counters per possible CPU) each interface's own.\n",
			r.kernelMem.prefixes, r.kernelMem.ifaces)
	}
	r.printSamplingNotes(w)
	for _, n := range r.bansNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	r.printDetectNotes(w)
	r.printFlowSpecNotes(w)
	fmt.Fprintf(w, "Namespace %s, deleted. Total time %s.\n", r.namespace, round(r.took))
}

// targetRulesNativeRatio is the live native throughput with 64 rules of
// ports and prefixes against bare.
const targetRulesNativeRatio = 0.9

func (r *report) printRules(w io.Writer) {
	for _, p := range r.rules {
		target, ok := "—", "—"
		if strings.Contains(p.set, "ports and") {
			target = fmt.Sprintf("≤ +%d ns", targetRulesDeltaNs)
			ok = met(p.delta <= targetRulesDeltaNs, fmt.Sprintf("%+.2f ns over", p.delta-targetRulesDeltaNs))
		}
		fmt.Fprintf(w, "| per-packet, %s | %s (%s) | %.2f ns | no rules %.2f ns | %+.2f ns (IQR %+.2f…%+.2f) | %s | %s |\n",
			p.set, p.frame, p.verdict, p.ours, p.base, p.delta, p.q1, p.q3, target, ok)
	}
	for _, t := range r.rulesThroughput {
		target, ok := "—", "—"
		if t.target {
			target = fmt.Sprintf("≥ %.2f×", targetRulesNativeRatio)
			ok = met(t.ratio >= targetRulesNativeRatio, fmt.Sprintf("%.3f× short", targetRulesNativeRatio-t.ratio))
		}
		fmt.Fprintf(w, "| throughput, native XDP, 64 rules, ports and prefixes | %s, veth, %s%s | %.2f Mpps/core | bare %.2f Mpps/core | %.3f× | %s | %s |\n",
			t.frame, t.what, t.senderCase(), t.ours, t.bare, t.ratio, target, t.unchecked(ok))
	}
	if s := r.rulesStartup; s != nil {
		fmt.Fprintf(w, "| rules start-up | 64 rules, %d prefixes per family, ports | load %s; rule maps %.1f MB kernel memory; %.1f MB allocated in Go | — | — | — | — |\n",
			s.prefixes, round(s.load), float64(s.ruleMemory)/1e6, float64(s.heap)/1e6)
	}
	for _, f := range r.prefixFile {
		for _, row := range f.rows() {
			fmt.Fprintln(w, row)
		}
	}
}

// senderCase names the sender in a throughput row's case where it is not
// live frames.
func (t throughputResult) senderCase() string {
	if t.live {
		return ""
	}
	return ", AF_PACKET sender"
}

// unchecked is ok for a trial by live frames; otherwise the reason the
// target was not checked.
func (t throughputResult) unchecked(ok string) string {
	if t.live {
		return ok
	}
	return fmt.Sprintf("not checked: %s; AF_PACKET reached %.2f Mframes/s, its own cost dominates, so the ratio measures the sender", t.refused, t.bareWall)
}

func met(ok bool, miss string) string {
	if ok {
		return "yes"
	}
	return "**no**: " + miss
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 10*time.Second:
		return d.Round(time.Second)
	case d > 10*time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(10 * time.Microsecond)
	}
}

// printSampling prints the sampling section's rows.
func (r *report) printSampling(w io.Writer) {
	for _, p := range r.sampling {
		target := fmt.Sprintf("≤ +%.1f ns", p.target)
		if math.IsNaN(p.target) {
			target = fmt.Sprintf("within noise: ±%.2f ns", (p.q3-p.q1)/2)
		}
		fmt.Fprintf(w, "| per-packet, %s | %s (XDP_DROP) | %.2f ns | %s %.2f ns | %+.2f ns (IQR %+.2f…%+.2f) | %s | %s |\n",
			p.name, p.frame, p.ours, p.base, p.bare, p.delta, p.q1, p.q3, target, met(p.met(), fmt.Sprintf("%+.2f ns", p.delta)))
	}
	if f := r.flood; f != nil {
		most := float64(f.cap) * 1.1
		fmt.Fprintf(w, "| sampling flood, sample_rate = 1 | %.1f Mframes in %s (%.2f Mframes/s, %s), veth | %.0f samples/s received; %d capped, %d lost | cap %d/s | %.3f× the cap | ≤ 1.1× | %s |\n",
			float64(f.frames)/1e6, round(f.took), float64(f.frames)/f.took.Seconds()/1e6, f.sender, f.perSecond, f.capped, f.lost, f.cap, f.perSecond/float64(f.cap), met(f.perSecond <= most, "over the cap"))
		fmt.Fprintf(w, "| sampling flood, memory and Gather | the bench process, plugin in it | RSS %.1f MB; Gather %s idle, %s after the flood | — | — | RSS < 64 MB; Gather ≤ 5 ms | %s |\n",
			float64(f.rssKB)/1024, f.gather.Round(time.Microsecond), f.gatherLoaded.Round(time.Microsecond),
			met(f.rssKB < 64<<10 && f.gather <= 5*time.Millisecond && f.gatherLoaded <= 5*time.Millisecond, "over"))
	}
}

func (r *report) printSamplingNotes(w io.Writer) {
	if len(r.sampling) > 0 {
		fmt.Fprintf(w, "Sampling: drop all, paired round by round as per-packet is; sample_rate = 0 against the program before sampling "+
			"(bench/testdata/before-sampling.o, the fixed object of commit c9fcf1d), met when the median difference is within half its IQR; "+
			"sample_rate = 1000 (cap %d/s, snaplen %d, samples read and discarded) against sample_rate = 0.\n", xdp_drop.DefaultSampleMaxPerSecond, xdp_drop.DefaultCaptureSnaplen)
	}
	for _, n := range r.samplingNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if r.flood != nil {
		fmt.Fprintf(w, "Sampling flood: the plugin (sample_rate = 1, sample_max_per_second = %d) on the veth, %s from its peer for %s; "+
			"samples/s = sampled (xdp_drop_link) over that time; RSS of the whole bench process, freed heap returned to the system before the plugin starts; Gather median of 20 idle, then one after the flood.\n", r.flood.cap, r.flood.sender, round(r.flood.took))
	}
}

// printBans prints the bans section's rows.
func (r *report) printBans(w io.Writer) {
	if len(r.bans) == 0 {
		return
	}
	for _, p := range r.bans {
		fmt.Fprintf(w, "| per-packet, %s | %s | %.2f ns | %s %.2f ns | %+.2f ns (IQR %+.2f…%+.2f) | ≤ +%.0f ns | %s |\n",
			p.name, p.frame, p.ours, p.base, p.bare, p.delta, p.q1, p.q3, p.target, met(p.met(), fmt.Sprintf("%+.2f ns", p.delta)))
	}
	a := r.banApply
	fmt.Fprintf(w, "| bans applied, %d new on %d in force | BanTable.Ban, then Lift, both families | %s applied, %s lifted | — | — | ≤ %s | %s |\n",
		banBenchDelta, banBenchCount, round(a.apply), round(a.lift), targetBanApply, met(a.apply <= targetBanApply && a.lift <= targetBanApply, "over"))
	if s := r.banSync; s != nil {
		fmt.Fprintf(w, "| bans startup sync, %d decisions (half Ip, half Range, both families; %.1f MB answer) | the plugin from Start to the gather that reports them in force | %s; RSS +%.1f MB | — | — | ≤ %s, RSS ≤ +%d MB | %s |\n",
			banSyncCount, float64(s.bodyBytes)/1e6, round(s.took), float64(s.rssGrowKB)/1024, targetBanSync, targetBanSyncRSS>>10,
			met(s.took <= targetBanSync && s.rssGrowKB <= targetBanSyncRSS, "over"))
	}
}
