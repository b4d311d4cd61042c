//go:build linux

package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// ruleBenchPrefixes is how many source prefixes per family the prefix rule
// sets spread over their 64 rules.
const ruleBenchPrefixes = 10_000

// targetRulesDeltaNs bounds the per-packet cost of 64 rules with ports and
// prefixes over the same policy without rules.
const targetRulesDeltaNs = 30

// ruleSet is a benchmark rule set: 64 rules, each dropping UDP and TCP by
// ports, by source prefixes, or by both.
type ruleSet struct {
	name   string
	policy bpf.Policy
}

// benchRules builds 64 rules; with prefixes every rule gets its share of
// ruleBenchPrefixes random /24s and /48s, with ports a destination port
// range of its own (1000+16i to 1000+16i+7). It returns the rules and a
// source address of each family inside the last rule's prefixes.
func benchRules(withPorts, withPrefixes bool, perFamily int) (rules []bpf.Rule, src4, src6 netip.Addr) {
	rng := rand.New(rand.NewPCG(1, 2))
	rules = make([]bpf.Rule, bpf.MaxRules)
	for i := range rules {
		r := &rules[i]
		r.Name = fmt.Sprintf("r%d", i)
		r.Drop = true
		r.Protocols = []uint8{frames.ProtoTCP, frames.ProtoUDP}
		if withPorts {
			lo := uint16(1000 + 16*i)
			r.DstPorts = []bpf.PortRange{{Lo: lo, Hi: lo + 7}}
		}
		if !withPrefixes {
			continue
		}
		n := perFamily / bpf.MaxRules
		if i < perFamily%bpf.MaxRules {
			n++
		}
		for k := 0; k < n; k++ {
			a4 := netip.AddrFrom4([4]byte{byte(rng.IntN(223) + 1), byte(rng.IntN(256)), byte(rng.IntN(256)), 0})
			var b16 [16]byte
			b16[0], b16[1] = 0x20, 0x01
			for j := 2; j < 6; j++ {
				b16[j] = byte(rng.IntN(256))
			}
			p4, _ := a4.Prefix(24)
			p6, _ := netip.AddrFrom16(b16).Prefix(48)
			r.SrcPrefixes = append(r.SrcPrefixes, p4, p6)
		}
	}
	last := rules[len(rules)-1]
	src4, src6 = netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("2001:db8::1")
	if withPrefixes {
		src4 = last.SrcPrefixes[0].Addr().Next()
		src6 = last.SrcPrefixes[1].Addr().Next()
	}
	return rules, src4, src6
}

type ruleBenchResult struct {
	set, frame string
	ours, base float64 // median ns per frame
	delta      float64 // median over rounds of ours - base in the same round
	q1, q3     float64
	verdict    string
}

// rulesPerPacket measures the rule sets against the same policy without
// rules, paired round by round as perPacket does, on frames that the last
// rule matches: every lookup a rule set has is made.
func rulesPerPacket(cfg perPacketConfig) ([]ruleBenchResult, []string, error) {
	base := bpf.Policy{Protocols: []uint8{frames.ProtoTCP, frames.ProtoUDP}}
	var src4, src6 netip.Addr
	sets := []ruleSet{{name: "no rules", policy: base}}
	for _, s := range []struct {
		name            string
		ports, prefixes bool
	}{{"64 rules, ports", true, false}, {"64 rules, 10,000 prefixes per family", false, true}, {"64 rules, ports and 10,000 prefixes per family", true, true}} {
		rules, a4, a6 := benchRules(s.ports, s.prefixes, ruleBenchPrefixes)
		if s.prefixes {
			src4, src6 = a4, a6
		}
		p := base
		p.Rules = rules
		sets = append(sets, ruleSet{name: s.name, policy: p})
	}
	dport := uint16(1000 + 16*(bpf.MaxRules-1) + 3)
	dst4, dst6 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:ff::1")
	fs := []struct {
		name  string
		frame []byte
	}{
		{"IPv4/UDP", frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, dport)), src4, dst4))},
		{"IPv6/TCP + hop-by-hop", frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoHopOpts,
			frames.Ext(frames.ProtoHopOpts, frames.ProtoTCP, 8, frames.Ports(frames.TCP(0), 40000, dport))), src6, dst6))},
	}
	progs := make([][]*bpf.Program, len(sets))
	defer func() {
		for _, ps := range progs {
			for _, p := range ps {
				p.Close()
			}
		}
	}()
	for i, s := range sets {
		for c := 0; c < cfg.copies; c++ {
			p, err := bpf.Load(s.policy)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", s.name, err)
			}
			progs[i] = append(progs[i], p)
		}
	}
	perFrame := make([][][]float64, len(sets))
	verdicts := make([][]uint32, len(sets))
	for i := range sets {
		perFrame[i] = make([][]float64, len(fs))
		verdicts[i] = make([]uint32, len(fs))
	}
	err := onLockedThread(func() error {
		for r := 0; r < cfg.rounds; r++ {
			for f, fr := range fs {
				for k := range sets {
					i := k
					if r%2 == 1 {
						i = len(sets) - 1 - k
					}
					tr, _, err := runRetrying(progs[i][r%cfg.copies].XDP(), fr.frame, cfg.repeat)
					if err != nil {
						return fmt.Errorf("%s on %s: %w", sets[i].name, fr.name, err)
					}
					perFrame[i][f] = append(perFrame[i][f], float64(tr.cpu.Nanoseconds())/float64(cfg.repeat))
					verdicts[i][f] = tr.retval
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var results []ruleBenchResult
	for i := 1; i < len(sets); i++ {
		for f, fr := range fs {
			if verdicts[i][f] != xdpDrop {
				return nil, nil, fmt.Errorf("%s on %s: verdict %s, want XDP_DROP", sets[i].name, fr.name, actionName(verdicts[i][f]))
			}
			deltas := make([]float64, cfg.rounds)
			for r := range deltas {
				deltas[r] = perFrame[i][f][r] - perFrame[0][f][r]
			}
			q1, q3 := quartiles(deltas)
			results = append(results, ruleBenchResult{
				set: sets[i].name, frame: fmt.Sprintf("%s %d B", fr.name, len(fr.frame)),
				ours: median(perFrame[i][f]), base: median(perFrame[0][f]), delta: median(deltas), q1: q1, q3: q3,
				verdict: actionName(verdicts[i][f]),
			})
		}
	}
	// The last rule decided every frame, in every load.
	for i := 1; i < len(sets); i++ {
		for _, p := range progs[i] {
			var b bpf.Block
			if err := p.ReadBlock(&b); err != nil {
				return nil, nil, err
			}
			var others uint64
			for r := 0; r < bpf.MaxRules-1; r++ {
				others += b.Rule[r].Packets
			}
			if b.Rule[bpf.MaxRules-1].Packets == 0 || others != 0 {
				return nil, nil, fmt.Errorf("%s: the last rule decided %d frames, the others %d: the frames must match the last rule only", sets[i].name, b.Rule[bpf.MaxRules-1].Packets, others)
			}
		}
	}
	note := "rules checked: in every load of every rule set the last rule, and no other, decided every frame"
	return results, []string{note}, nil
}

type ruleStartup struct {
	prefixes      int // per family
	load          time.Duration
	ruleMemory    uint64 // kernel memory of the rule maps
	heap          uint64 // Go heap allocated by the load
	verifierInsns int
}

// rulesStartup loads 64 rules with 100,000 source prefixes per family and
// ports, as Init and Start would, and measures the time and memory.
func rulesStartup() (ruleStartup, error) {
	rules, _, _ := benchRules(true, true, bpf.MaxPrefixes)
	// Half the prefixes in each direction: the limit counts both.
	for i := range rules {
		half := len(rules[i].SrcPrefixes) / 2
		rules[i].DstPrefixes = rules[i].SrcPrefixes[half:]
		rules[i].SrcPrefixes = rules[i].SrcPrefixes[:half]
	}
	policy := bpf.Policy{Protocols: []uint8{frames.ProtoTCP, frames.ProtoUDP}, Rules: rules}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	p, err := bpf.Load(policy)
	took := time.Since(start)
	if err != nil {
		return ruleStartup{}, err
	}
	defer p.Close()
	runtime.ReadMemStats(&after)
	mem, err := p.RuleMemory()
	if err != nil {
		return ruleStartup{}, err
	}
	info, err := p.XDP().Info()
	if err != nil {
		return ruleStartup{}, err
	}
	insns, _ := info.Instructions()
	return ruleStartup{prefixes: bpf.MaxPrefixes, load: took, ruleMemory: mem, heap: after.TotalAlloc - before.TotalAlloc, verifierInsns: len(insns)}, nil
}

// ruleThroughputCase is one frame of the rules' throughput trial.
type ruleThroughputCase struct {
	what   string // what the rules do with the frame
	frame  []byte
	target bool // the case the target is for
}

// rulesThroughput is throughput's native trial with the rule set of ports
// and prefixes against bare, on IPv4/UDP frames the last rule drops (every
// lookup made: the target's case), and on frames to a port no rule lists,
// which no prefix lookup is made for (like most of the traffic an
// operator's rules are not aimed at).
func rulesThroughput(e *env, cfg throughputConfig) ([]throughputResult, error) {
	gen, bare, done, err := throughputPrograms(e)
	if err != nil {
		return nil, err
	}
	defer done()
	rules, src4, _ := benchRules(true, true, ruleBenchPrefixes)
	// Frames no rule decides are dropped by the policy too: bare drops
	// every frame, and a passed frame would cost the stack's work.
	ours, err := bpf.Load(bpf.Policy{Protocols: []uint8{frames.ProtoTCP, frames.ProtoUDP}, Rules: rules})
	if err != nil {
		return nil, err
	}
	defer ours.Close()
	dst := netip.MustParseAddr("198.51.100.1")
	udp := func(dport uint16) []byte {
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, dport)), src4, dst))
	}
	cases := []ruleThroughputCase{
		{"dropped by the last rule", udp(uint16(1000 + 16*(bpf.MaxRules-1) + 3)), true},
		{"to a port no rule lists, dropped by the policy", udp(53), false},
	}
	var results []throughputResult
	for _, c := range cases {
		r, err := e.againstBare(gen, bare, ours, link.XDPDriverMode, c.frame, cfg)
		if err != nil {
			return nil, fmt.Errorf("rules, %s: %w", c.what, err)
		}
		r.mode, r.what, r.target = bpf.ModeNative, c.what, c.target
		results = append(results, r)
	}
	return results, nil
}
