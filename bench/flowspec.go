//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// flowSetSizes are the FlowSpec rule sets measured besides none: 64 and
// bpf.FlowMaxRules (1,024), all of the frame's family.
var flowSetSizes = []int{64, bpf.FlowMaxRules}

type flowSpecConfig struct {
	testRun perPacketConfig
	trials  int // receive path: trials, each every configuration once
	frames  int // receive path: frames a configuration sends in a trial
}

// flowCase is what the frame under test is to the rule set: it matches no
// rule (every rule evaluated: the worst case of a linear evaluator), or
// the last one.
type flowCase int

const (
	flowMiss flowCase = iota
	flowLast
)

func (c flowCase) String() string {
	if c == flowMiss {
		return "matches no rule"
	}
	return "matches the last rule"
}

// frameFor is the frame of case c against a set of n rules.
func (c flowCase) frameFor(n int) []byte {
	if c == flowMiss || n == 0 {
		return flowFrame(flowMissDst)
	}
	return flowFrame(flowRuleDst(n - 1))
}

// flowTestRunRow is the engine with n rules on one case under
// BPF_PROG_TEST_RUN, against bare and against the engine without rules.
type flowTestRunRow struct {
	rules      int
	what       flowCase
	frameLen   int
	ours       float64 // median ns per frame
	bare, none float64 // median ns per frame of bare and of the engine without rules on the same frame
	ratio      float64 // median over rounds of ours / bare in the same round
	delta      pairedDelta
	verdict    string
}

// flowTestRun measures the engine with no rules, 64 and 1,024 against
// bare with BPF_PROG_TEST_RUN, paired round by round as perPacket does,
// on the frame that matches no rule and the one that matches the last.
func flowTestRun(e *env, cfg perPacketConfig) ([]flowTestRunRow, []string, error) {
	sizes := append([]int{0}, flowSetSizes...)
	names := []string{"bare"}
	for _, n := range sizes {
		names = append(names, fmt.Sprintf("FlowSpec, %d rules", n))
	}
	progs := make([][]*ebpf.Program, len(names))
	engines := make([][]*flowEngine, len(names))
	var closers []io.Closer
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
	}()
	for c := 0; c < cfg.copies; c++ {
		bare, err := loadReturn("xdp_bare_drop", xdpDrop)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, bare)
		progs[0] = append(progs[0], bare)
		for i, n := range sizes {
			fe, err := loadFlowEngine(benchFlowRules(n))
			if err != nil {
				return nil, nil, fmt.Errorf("FlowSpec engine, %d rules: %w", n, err)
			}
			closers = append(closers, fe)
			engines[i+1] = append(engines[i+1], fe)
			progs[i+1] = append(progs[i+1], fe.xdp())
		}
		for i := range progs {
			l, err := e.keepInDispatcher(progs[i][c])
			if err != nil {
				return nil, nil, err
			}
			closers = append(closers, l)
		}
	}
	// Frames: the one no rule matches, then the last rule's of each set.
	fs := []benchFrame{{name: "IPv4/UDP NTP reflection, " + flowMiss.String(), frame: flowMiss.frameFor(0)}}
	for _, n := range flowSetSizes {
		fs = append(fs, benchFrame{name: fmt.Sprintf("IPv4/UDP NTP reflection, the last of %d rules' destination", n), frame: flowLast.frameFor(n)})
	}
	// Bare and the engine without rules run every frame; a set runs the
	// frame no rule matches and its own last rule's.
	runs := func(c, f int) bool {
		return c <= 1 || f == 0 || flowSetSizes[f-1] == sizes[c-1]
	}
	t, err := timeRounds(names, progs, runs, fs, cfg, true)
	if err != nil {
		return nil, nil, err
	}
	var rows []flowTestRunRow
	for i, n := range sizes {
		c := i + 1
		for f := range fs {
			if !runs(c, f) || n == 0 && f > 0 {
				continue
			}
			what := flowMiss
			if f > 0 {
				what = flowLast
			}
			want := uint32(xdpPass)
			if what == flowLast {
				want = xdpDrop
			}
			if got := t.verdicts[c][f]; got != want {
				return nil, nil, fmt.Errorf("%s on %s: verdict %s, want %s", names[c], fs[f].name, actionName(got), actionName(want))
			}
			ratios := make([]float64, len(t.perFrame[c][f]))
			for r := range ratios {
				ratios[r] = t.perFrame[c][f][r] / t.perFrame[0][f][r]
			}
			rows = append(rows, flowTestRunRow{
				rules: n, what: what, frameLen: len(fs[f].frame),
				ours: median(t.perFrame[c][f]), bare: median(t.perFrame[0][f]), none: median(t.perFrame[1][f]),
				ratio: median(ratios), delta: paired(t.perFrame[c][f], t.perFrame[1][f], cfg.copies),
				verdict: actionName(t.verdicts[c][f]),
			})
		}
	}
	// Counters: the last rule, and no other, counted every run of its
	// frame; the frame no rule matches was counted by none.
	for i, n := range sizes {
		for l, fe := range engines[i+1] {
			rounds := cfg.rounds / cfg.copies
			if l < cfg.rounds%cfg.copies {
				rounds++
			}
			want := map[string]uint64{}
			if n > 0 {
				want[benchFlowRules(n)[n-1].ID] = uint64(rounds) * uint64(cfg.repeat)
			}
			if err := fe.checkCounters(want, t.interrupted > 0); err != nil {
				return nil, nil, fmt.Errorf("%s, load %d: %w", names[i+1], l, err)
			}
		}
	}
	var mem []string
	for i, n := range sizes {
		mem = append(mem, fmt.Sprintf("%d rules %.2f MB", n, float64(engines[i+1][0].memory)/1e6))
	}
	memNote := "FlowSpec maps' kernel memory (memlock, FlowTable.Memory, sized for the most rules of both families whatever the set): " + strings.Join(mem, ", ")
	note := "FlowSpec counters checked: in every load the last rule, and no other, counted every run of its frame"
	if t.interrupted > 0 {
		note = fmt.Sprintf("%d runs interrupted by signals and repeated: FlowSpec counters checked as at least the runs made, on the last rule only", t.interrupted)
	}
	return rows, []string{memNote, note}, nil
}

// flowStackConfig is one configuration of the receiving veth in the
// receive-path measurement.
type flowStackConfig struct {
	name   string
	kind   string // "stack", "bare", "engine", "netdev", "inet"
	rules  int
	engine *flowEngine
	nft    string // the ruleset, for netdev and inet
	nftDel []string
	// dropsAll: the nftables floor, one rule that drops every frame.
	dropsAll bool
}

// flowStackRow is one configuration and case measured through the stack:
// the CPU time per frame of sending it by AF_PACKET into the veth and
// everything the kernel does with it there.
type flowStackRow struct {
	name, kind string
	rules      int
	what       flowCase
	ns         float64 // median CPU ns per frame
	bare       float64 // median of bare XDP_DROP, same run
	ratio      float64 // median over trials of ns / bare in the same trial
	none       float64 // median of the same kind without rules
	delta      []float64
	mfps       float64 // median frames/s over wall time, millions
	softirqd   float64 // median share of the CPU time that ksoftirqd ran
}

// The nftables tables of the receive-path measurement.
var (
	flowNetdevChain = nftChain{family: "netdev", table: "xdpbench", chain: "flowspec", hook: "ingress", device: testns.Dev}
	flowInetChain   = nftChain{family: "inet", table: "xdpbench", chain: "flowspec", hook: "prerouting"}
)

// flowStack measures, through the receive path, the cost per frame of the
// FlowSpec rules as the engine (native XDP on the receiving veth) and as
// nftables rules (a netdev ingress chain on the veth, the earliest hook
// nftables has; an inet prerouting chain, the earliest of the IP hooks
// translators use), with no rules, 64 and 1,024, beside the stack with
// nothing and bare XDP_DROP, all in the same trials: txgen's AF_PACKET
// transport sends the frames out of the veth's peer from one thread bound
// to one CPU, and the CPU time per frame is that thread's (which runs the
// receive path in its softirq: this kernel has no IRQ time accounting, so
// a task's time includes the softirqs it runs) plus that CPU's ksoftirqd's
// (the softirq work deferred to it), read to the nanosecond from
// CLOCK_THREAD_CPUTIME_ID and /proc/<pid>/schedstat. A frame nothing drops
// goes on to routing, where a blackhole route for 198.18.0.0/15 (with
// forwarding on) drops it without an answer, the same in every
// configuration.
func flowStack(e *env, cfg flowSpecConfig) ([]flowStackRow, []string, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, nil, fmt.Errorf("nft not found (Debian: apt-get install nftables): the nftables side needs it")
	}
	// AF_PACKET wherever live frames are granted too: the frames must
	// come to the veth as the stack's, for nftables as for XDP.
	gen := txgen.NewPacket()
	defer gen.Close()
	if err := e.flowStackSetup(); err != nil {
		return nil, nil, err
	}
	cpus, err := txgen.AllowedCPUs()
	if err != nil {
		return nil, nil, err
	}
	cpu := cpus[len(cpus)-1]
	ksoftirqd, err := findKsoftirqd(cpu)
	if err != nil {
		return nil, nil, err
	}

	bare, err := loadReturn("xdp_bare_drop", xdpDrop)
	if err != nil {
		return nil, nil, err
	}
	defer bare.Close()
	configs := []*flowStackConfig{{name: "the stack alone, nothing attached", kind: "stack"}, {name: "bare XDP_DROP", kind: "bare"}}
	for _, n := range append([]int{0}, flowSetSizes...) {
		fe, err := loadFlowEngine(benchFlowRules(n))
		if err != nil {
			return nil, nil, fmt.Errorf("FlowSpec engine, %d rules: %w", n, err)
		}
		defer fe.Close()
		configs = append(configs, &flowStackConfig{name: fmt.Sprintf("FlowSpec engine, %d rules", n), kind: "engine", rules: n, engine: fe})
	}
	for _, ch := range []nftChain{flowNetdevChain, flowInetChain} {
		for _, n := range append([]int{0}, flowSetSizes...) {
			text, err := nftRuleset(ch, benchFlowRules(n))
			if err != nil {
				return nil, nil, err
			}
			configs = append(configs, &flowStackConfig{
				name: fmt.Sprintf("nftables %s %s, %d rules", ch.family, ch.hook, n), kind: ch.family, rules: n,
				nft: text, nftDel: []string{"delete", "table", ch.family, ch.table},
			})
		}
	}
	// nftables' floor beside bare XDP_DROP's: a netdev ingress chain
	// whose one rule drops every frame.
	floor := flowNetdevChain
	configs = append(configs, &flowStackConfig{
		name: "nftables netdev ingress, one rule: drop", kind: "netdev-floor", dropsAll: true,
		nft:    fmt.Sprintf("table netdev %s {\n\tchain %s {\n\t\ttype filter hook ingress device %q priority filter; policy accept;\n\t\tdrop\n\t}\n}\n", floor.table, floor.chain, floor.device),
		nftDel: []string{"delete", "table", floor.family, floor.table},
	})
	// Before timing: every nftables configuration drops what it is to
	// drop and passes the rest (a counter at the chain's end counts what
	// passed every rule).
	for _, c := range configs {
		if c.nft == "" {
			continue
		}
		if err := e.checkNft(gen, c, cpu); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}

	cases := func(c *flowStackConfig) []flowCase {
		if c.rules == 0 {
			return []flowCase{flowMiss}
		}
		return []flowCase{flowMiss, flowLast}
	}
	type key struct {
		c    int
		what flowCase
	}
	perFrame := map[key][]float64{}
	mfps := map[key][]float64{}
	softShare := map[key][]float64{}
	sent := map[key]uint64{}
	order := make([]int, len(configs))
	for t := 0; t < cfg.trials; t++ {
		turn(order, t, true)
		for _, ci := range order {
			c := configs[ci]
			undo, err := e.flowStackApply(c, bare)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", c.name, err)
			}
			for _, what := range cases(c) {
				m, err := e.stackTrial(gen, what.frameFor(c.rules), cfg.frames, cpu, ksoftirqd)
				if err != nil {
					undo()
					return nil, nil, fmt.Errorf("%s, %s, trial %d: %w", c.name, what, t, err)
				}
				k := key{ci, what}
				perFrame[k] = append(perFrame[k], m.ns)
				mfps[k] = append(mfps[k], m.mfps)
				softShare[k] = append(softShare[k], m.softShare)
				sent[k] += uint64(cfg.frames)
			}
			if err := undo(); err != nil {
				return nil, nil, fmt.Errorf("%s: undo: %w", c.name, err)
			}
		}
	}
	// The engine's counters: the last rule, and no other, counted every
	// frame of its case.
	for ci, c := range configs {
		if c.engine == nil {
			continue
		}
		want := map[string]uint64{}
		if c.rules > 0 {
			want[benchFlowRules(c.rules)[c.rules-1].ID] = sent[key{ci, flowLast}]
		}
		if err := c.engine.checkCounters(want, false); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}

	bareIdx := 1
	noneOf := map[string]int{}
	for ci, c := range configs {
		if c.rules == 0 {
			noneOf[c.kind] = ci
		}
	}
	var rows []flowStackRow
	for ci, c := range configs {
		for _, what := range cases(c) {
			k := key{ci, what}
			b := perFrame[key{bareIdx, flowMiss}]
			ratios := make([]float64, len(perFrame[k]))
			for i := range ratios {
				ratios[i] = perFrame[k][i] / b[i]
			}
			row := flowStackRow{
				name: c.name, kind: c.kind, rules: c.rules, what: what,
				ns: median(perFrame[k]), bare: median(b), ratio: median(ratios),
				mfps: median(mfps[k]), softirqd: median(softShare[k]),
			}
			// A frame no rule matches against the same hook without
			// rules (both pass it on); one the last rule drops against
			// bare XDP_DROP (both drop it).
			if n, ok := noneOf[c.kind]; ok && c.rules > 0 {
				z := perFrame[key{n, flowMiss}]
				row.none = median(z)
				if what == flowLast {
					z = b
				}
				for i := range perFrame[k] {
					row.delta = append(row.delta, perFrame[k][i]-z[i])
				}
			}
			rows = append(rows, row)
		}
	}
	notes := []string{
		fmt.Sprintf("through the stack: %d trials × %d frames per configuration and case, configurations in turn (order reversed and rotated trial by trial), sent by %s from one thread bound to CPU %d", cfg.trials, cfg.frames, "AF_PACKET (txgen: sendmmsg, qdisc bypassed)", cpu),
		"through the stack checked: in every trial the veth's rx_packets grew by exactly the frames sent; the engine's counters: the last rule, and no other, counted every frame of its case; every nftables configuration, before timing, passed every frame that matches no rule to the end of its chain and dropped every one that matches the last rule (a counter at the chain's end, 1,000 frames of each)",
	}
	return rows, notes, nil
}

// flowStackSetup makes the veth take the section's frames as its own
// (PACKET_HOST: their destination MAC is the veth's), turns forwarding on
// and routes 198.18.0.0/15 to a blackhole, so that a frame nothing drops
// reaches routing and is dropped there without an answer.
func (e *env) flowStackSetup() error {
	nl := e.ns.Netlink()
	l, err := nl.LinkByName(testns.Dev)
	if err != nil {
		return err
	}
	if err := nl.LinkSetHardwareAddr(l, net.HardwareAddr(frames.DstMAC[:])); err != nil {
		return fmt.Errorf("set %s's MAC: %w", testns.Dev, err)
	}
	if err := e.ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0)
	}); err != nil {
		return fmt.Errorf("forwarding on in the namespace: %w", err)
	}
	dst := net.IPNet{IP: flowDstRange.Addr().AsSlice(), Mask: net.CIDRMask(flowDstRange.Bits(), 32)}
	if err := nl.RouteAdd(&netlink.Route{Dst: &dst, Type: unix.RTN_BLACKHOLE}); err != nil {
		return fmt.Errorf("blackhole route for %s: %w", flowDstRange, err)
	}
	return nil
}

// flowStackApply puts c on the receiving veth; the result takes it off.
func (e *env) flowStackApply(c *flowStackConfig, bare *ebpf.Program) (func() error, error) {
	switch c.kind {
	case "stack":
		return func() error { return nil }, nil
	case "bare", "engine":
		prog := bare
		if c.engine != nil {
			prog = c.engine.xdp()
		}
		l, err := e.attach(prog, testns.Dev, link.XDPDriverMode)
		if err != nil {
			return nil, err
		}
		return l.Close, nil
	default:
		if err := e.nft(c.nft, "-f", "-"); err != nil {
			return nil, err
		}
		return func() error { return e.nft("", c.nftDel...) }, nil
	}
}

// nft runs nft in the namespace, with stdin as its input.
func (e *env) nft(stdin string, args ...string) error {
	cmd := e.ns.Exec("nft", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", testns.Cmdline(cmd), err, strings.TrimSpace(string(out)))
	}
	return nil
}

var nftCounterPackets = regexp.MustCompile(`counter packets (\d+) bytes`)

// checkNft loads c's ruleset with a counter at the chain's end, sends
// 1,000 frames of each case and checks that exactly those of the case no
// rule matches reached the counter.
func (e *env) checkNft(gen *txgen.Generator, c *flowStackConfig, cpu int) error {
	text := strings.Replace(c.nft, "\t}\n}\n", "\t\tcounter\n\t}\n}\n", 1)
	if err := e.nft(text, "-f", "-"); err != nil {
		return err
	}
	defer e.nft("", c.nftDel...)
	const each = 1000
	want := uint64(each)
	for _, what := range []flowCase{flowMiss, flowLast} {
		if _, err := e.stackTrial(gen, what.frameFor(c.rules), each, cpu, 0); err != nil {
			return err
		}
	}
	if c.rules == 0 {
		want = 2 * each
	}
	if c.dropsAll {
		want = 0
	}
	cmd := e.ns.Exec("nft", "list", "chain", c.nftDel[2], c.nftDel[3], "flowspec")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", testns.Cmdline(cmd), err, out)
	}
	m := nftCounterPackets.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("no counter in the chain as nft lists it")
	}
	got, _ := strconv.ParseUint(string(m[1]), 10, 64)
	if got != want {
		return fmt.Errorf("%d frames passed every rule, want %d (%d of each case sent)", got, want, each)
	}
	return nil
}

// stackMeasure is one send through the stack.
type stackMeasure struct {
	ns        float64 // CPU ns per frame
	mfps      float64 // million frames a second, wall time
	softShare float64 // the share of ns that ksoftirqd ran
}

// stackTrial sends n copies of frame from the peer, on a thread bound to
// cpu, and returns the CPU time per frame: the thread's and, with
// ksoftirqd (a pid) non-zero, cpu's ksoftirqd's, read once the veth has
// received every frame and gone quiet. It checks that the veth received
// exactly n.
func (e *env) stackTrial(gen *txgen.Generator, frame []byte, n, cpu, ksoftirqd int) (stackMeasure, error) {
	rx0, err := e.ns.RxPackets(testns.Dev)
	if err != nil {
		return stackMeasure{}, err
	}
	var m stackMeasure
	err = e.ns.Do(func() error {
		return txgen.OnCPU(cpu, func() error {
			var c0, c1 unix.Timespec
			k0, err := schedRuntime(ksoftirqd)
			if err != nil {
				return err
			}
			w0 := time.Now()
			_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
			err = gen.Send(e.ns.PeerIdx, frame, n)
			_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
			wall := time.Since(w0)
			if err != nil {
				return err
			}
			rx1, err := e.waitRx(rx0)
			if err != nil {
				return err
			}
			if got := rx1 - rx0; got != uint64(n) {
				return fmt.Errorf("sent %d frames, the veth received %d", n, got)
			}
			k1, err := schedRuntime(ksoftirqd)
			if err != nil {
				return err
			}
			thread := float64(c1.Nano() - c0.Nano())
			soft := float64(k1 - k0)
			m = stackMeasure{ns: (thread + soft) / float64(n), mfps: float64(n) / wall.Seconds() / 1e6, softShare: soft / (thread + soft)}
			return nil
		})
	})
	return m, err
}

// findKsoftirqd returns the pid of cpu's ksoftirqd.
func findKsoftirqd(cpu int) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf("ksoftirqd/%d\n", cpu)
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + ent.Name() + "/comm"); err == nil && string(b) == want {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no ksoftirqd/%d in /proc", cpu)
}

// schedRuntime is the time pid has run, in ns (the first field of
// /proc/<pid>/schedstat); 0 for pid 0.
func schedRuntime(pid int) (int64, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("empty schedstat")
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// printFlowSpec prints the FlowSpec section's rows.
func (r *report) printFlowSpec(w io.Writer) {
	for _, p := range r.flowTestRun {
		base := fmt.Sprintf("bare %.2f ns", p.bare)
		vs := fmt.Sprintf("%.2f× bare", p.ratio)
		if p.rules > 0 {
			base += fmt.Sprintf("; FlowSpec, no rules %.2f ns", p.none)
			vs += fmt.Sprintf("; %+.2f ns over no rules (IQR %+.2f…%+.2f)", p.delta.median, p.delta.q1, p.delta.q3)
		}
		fmt.Fprintf(w, "| per-packet, FlowSpec engine, %d rules, BPF_PROG_TEST_RUN | IPv4/UDP %d B, %s (%s) | %.2f ns | %s | %s | — | — |\n",
			p.rules, p.frameLen, p.what, p.verdict, p.ours, base, vs)
	}
	for _, s := range r.flowStack {
		base := fmt.Sprintf("bare XDP_DROP %.0f ns", s.bare)
		vs := fmt.Sprintf("%.2f× bare", s.ratio)
		if s.rules > 0 {
			base += fmt.Sprintf("; the same without rules %.0f ns", s.none)
			over := "the same without rules"
			if s.what == flowLast {
				over = "bare XDP_DROP"
			}
			vs += fmt.Sprintf("; %+.0f ns over %s (trials %+.0f…%+.0f)", median(s.delta), over, slices.Min(s.delta), slices.Max(s.delta))
		}
		fmt.Fprintf(w, "| through the stack, %s | IPv4/UDP 482 B, %s%s, AF_PACKET into the veth | %.0f ns CPU a frame (%.2f Mframes/s; ksoftirqd %.0f %%) | %s | %s | — | — |\n",
			s.name, s.what, flowStackWhere(s.kind), s.ns, s.mfps, 100*s.softirqd, base, vs)
	}
}

// flowStackWhere says where a configuration decides.
func flowStackWhere(kind string) string {
	switch kind {
	case "engine", "bare":
		return " (native XDP on the veth)"
	case "netdev", "netdev-floor":
		return " (netdev ingress chain on the veth: the earliest nftables hook)"
	case "inet":
		return " (inet prerouting chain: the earliest IP hook, before routing)"
	}
	return ""
}

func (r *report) printFlowSpecNotes(w io.Writer) {
	if len(r.flowTestRun) > 0 {
		c := r.cfg.flowSpec.testRun
		fmt.Fprintf(w, "FlowSpec, per-packet: the engine (FlowSpec on, nothing else in the policy) with no rules, 64 and 1,024 IPv4 rules of four kinds "+
			"(NTP reflection to a /32, as the done-test's; DNS reflection with a length range; a SYN flood to ports 80 and 443; a destination port range), each for a destination of its own, "+
			"against bare, BPF_PROG_TEST_RUN paired round by round as per-packet is, %d rounds × %d runs, %d loads of each taken in turn, the order also rotated; "+
			"the frame (an NTP reflection, UDP from port 123, IP length 468) to a destination no rule names, or to the last rule's.\n", c.rounds, c.repeat, c.copies)
	}
	if len(r.flowStack) > 0 {
		fmt.Fprintf(w, "FlowSpec, through the stack: the same rule sets as the engine (native XDP) and as nftables rules, one per FlowSpec rule as translators write them "+
			"(e.g. ip daddr 198.18.4.0 udp sport 123 ip length >= 400 drop), in a netdev ingress chain on the veth and in an inet prerouting chain; "+
			"CPU time per frame = the sending thread's (bound to one CPU; it runs the receive path in its softirq, which this kernel's accounting, without IRQ time accounting, gives to the task) "+
			"+ that CPU's ksoftirqd's, to the nanosecond (CLOCK_THREAD_CPUTIME_ID, /proc/<pid>/schedstat); a frame nothing drops is dropped by a blackhole route; "+
			"ratio = median over trials of the configuration / bare XDP_DROP in the same trial; the delta is paired by trial: a frame no rule matches with the same hook without rules (both pass it on), one the last rule drops with bare XDP_DROP (both drop it); "+
			"on a veth, native XDP copies every frame the stack sent into a page with XDP headroom before the program runs (veth_convert_skb_to_xdp_buff, skb_pp_cow_data: an AF_PACKET skb has less headroom than XDP needs), a cost of veth, not of a NIC driver's XDP, that bare XDP_DROP and the engine pay and nftables does not.\n")
	}
	for _, n := range r.flowSpecNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
