//go:build linux

package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// Targets of the bans section, as BENCHMARKS.md states them.
const (
	targetBanNs    = 15.0        // a frame with 100,000 bans in force, against no bans
	targetBanApply = time.Second // 10,000 new bans applied
	banBenchCount  = 100_000     // bans in force, both families
	banBenchDelta  = 10_000      // bans applied and lifted in the apply row
)

// banApply is the apply row: banBenchDelta new bans put in force, then
// lifted, on a table holding banBenchCount.
type banApply struct {
	apply, lift time.Duration
	memory      uint64 // the ban maps' kernel memory, as the kernel accounts it
}

// fillBans puts the fixed bans in t and, with random, banBenchCount in
// all: half of each family, half /32 (/128), a quarter /24 and /16 (/64 and
// /48) each, none in a case's bucket. It returns the filter bits the
// entries set. Every table gets the same bans.
func fillBans(t *bpf.BanTable, fixed banFixed, random bool) (map[uint32]bool, error) {
	end := time.Now().Add(24 * time.Hour)
	bits := map[uint32]bool{}
	n := 0
	ban := func(p netip.Prefix) error {
		o, err := t.Ban(p, end, bpf.BanOriginCrowdSec)
		if err != nil {
			return err
		}
		if o == bpf.BanAdded {
			bits[banFilterBit(p)] = true
			n++
		}
		return nil
	}
	for _, p := range fixed.entries {
		if err := ban(p); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	lens4, lens6 := []int{32, 32, 24, 16}, []int{128, 128, 64, 48}
	for i := 0; random && n < banBenchCount; i++ {
		var p netip.Prefix
		if i%2 == 0 {
			var a [4]byte
			for j := range a {
				a[j] = byte(rng.Uint32())
			}
			p = netip.PrefixFrom(netip.AddrFrom4(a), lens4[i/2%4])
		} else {
			var a [16]byte
			a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
			for j := 4; j < 16; j++ {
				a[j] = byte(rng.Uint32())
			}
			p = netip.PrefixFrom(netip.AddrFrom16(a), lens6[i/2%4])
		}
		p = p.Masked()
		if fixed.reserved[banBucket(p)] {
			continue
		}
		if err := ban(p); err != nil {
			return nil, err
		}
	}
	return bits, nil
}

// The programs of the bans rows, by index in bansPerPacket's names.
const (
	banProgNone = iota
	banProgFull
	banProgSmall
	banProgRuleNone
	banProgRuleFull
)

// banRule is the rule of the programs with rules: it matches none of the
// frames, which it makes go through the rules' path (ban_lookup a function
// of its own) to the policy.
var banRule = bpf.Rule{Name: "gre", Drop: true, Protocols: []uint8{47}}

// bansPerPacket measures, paired round by round, the program with
// banBenchCount bans in force against the same program without bans, on a
// frame from each case's source; beside it, the same with only the cases'
// bans, and with a rule; then the banned and empty cases as bpftool prog run
// times them; and the time to apply banBenchDelta new bans and lift them.
func bansPerPacket(cfg perPacketConfig, quick bool) ([]samplingResult, banApply, []string, error) {
	var apply banApply
	fixed, err := newBanFixed()
	if err != nil {
		return nil, apply, nil, err
	}
	names := []string{"no bans", fmt.Sprintf("%d bans in force", banBenchCount),
		fmt.Sprintf("the cases' %d bans alone", len(fixed.entries)), "no bans, 1 rule", fmt.Sprintf("%d bans in force, 1 rule", banBenchCount)}
	policies := []bpf.Policy{{}, {Bans: bpf.BansConfig{On: true}}, {Bans: bpf.BansConfig{On: true}},
		{Rules: []bpf.Rule{banRule}}, {Rules: []bpf.Rule{banRule}, Bans: bpf.BansConfig{On: true}}}
	progs := make([][]*ebpf.Program, len(names))
	var loaded []*bpf.Program
	defer func() {
		for _, p := range loaded {
			p.Close()
		}
	}()
	var table *bpf.BanTable
	var bits map[uint32]bool
	for c := 0; c < cfg.copies; c++ {
		for i, policy := range policies {
			p, err := bpf.Load(policy)
			if err != nil {
				return nil, apply, nil, fmt.Errorf("%s: %w", names[i], err)
			}
			loaded = append(loaded, p)
			progs[i] = append(progs[i], p.XDP())
			if !policy.Bans.On {
				continue
			}
			t, err := p.Bans()
			if err != nil {
				return nil, apply, nil, err
			}
			b, err := fillBans(t, fixed, i != banProgSmall)
			if err != nil {
				return nil, apply, nil, err
			}
			if i == banProgFull {
				table, bits = t, b
			}
		}
	}
	var fs []benchFrame
	for _, bc := range fixed.cases {
		var frame []byte
		var class bpf.Class
		if bc.src.Is4() {
			l3 := frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)), bc.src, netip.MustParseAddr("192.0.2.53"))
			frame, class = frames.Ether(frames.EtherIPv4, l3), bpf.IPv4Class(frames.ProtoUDP)
		} else {
			l3 := frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(18)), bc.src, netip.MustParseAddr("2001:db8::53"))
			frame, class = frames.Ether(frames.EtherIPv6, l3), bpf.IPv6Class(frames.ProtoUDP)
		}
		lookups := 0
		for _, k := range bc.probed() {
			if bits[banFilterBit(k)] {
				lookups++
			}
		}
		name := fmt.Sprintf("%s (%d probed, %d looked up)", bc.name, len(bc.probed()), lookups)
		fs = append(fs, benchFrame{name, frame, class, false})
	}
	t, err := timeRounds(names, progs, func(int, int) bool { return true }, fs, cfg, true)
	if err != nil {
		return nil, apply, nil, err
	}
	var results []samplingResult
	var notes []string
	for f, bc := range fixed.cases {
		for i, policy := range policies {
			want := uint32(xdpPass)
			if bc.banned && policy.Bans.On {
				want = xdpDrop
			}
			if got := t.verdicts[i][f]; got != want {
				return nil, apply, nil, fmt.Errorf("%s on %s: verdict %s, want %s", names[i], fs[f], actionName(got), actionName(want))
			}
		}
		pd := paired(t.perFrame[banProgFull][f], t.perFrame[banProgNone][f], cfg.copies)
		results = append(results, samplingResult{
			name: names[banProgFull], base: names[banProgNone], frame: fs[f].String(),
			ours: median(t.perFrame[banProgFull][f]), bare: median(t.perFrame[banProgNone][f]),
			delta: pd.median, q1: pd.q1, q3: pd.q3, target: targetBanNs,
		})
		small := paired(t.perFrame[banProgSmall][f], t.perFrame[banProgNone][f], cfg.copies)
		rule := paired(t.perFrame[banProgRuleFull][f], t.perFrame[banProgRuleNone][f], cfg.copies)
		kern := paired(t.kernel[banProgFull][f], t.kernel[banProgNone][f], cfg.copies)
		notes = append(notes, fmt.Sprintf("%s: kernel-reported %+.1f ns; %s %+.2f ns (IQR %+.2f…%+.2f); with 1 rule, against no bans with it, %+.2f ns (IQR %+.2f…%+.2f)",
			bc.name, kern.median, names[banProgSmall], small.median, small.q1, small.q3, rule.median, rule.q1, rule.q3))
	}
	bt, err := bpftoolWay(progs, fs, quick)
	if err != nil {
		return nil, apply, nil, err
	}
	notes = append(notes, bt...)
	// The apply row, on the last table: new /32s of both families.
	var delta []netip.Prefix
	for i := range banBenchDelta {
		if i%2 == 0 {
			delta = append(delta, netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)}), 32))
		} else {
			delta = append(delta, netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 14: byte(i >> 8), 15: byte(i)}), 128))
		}
	}
	end := time.Now().Add(time.Hour)
	start := time.Now()
	for _, p := range delta {
		o, err := table.Ban(p, end, bpf.BanOriginCrowdSec)
		if err != nil {
			return nil, apply, nil, err
		}
		if o != bpf.BanAdded {
			return nil, apply, nil, fmt.Errorf("apply %s: %s, want added", p, o)
		}
	}
	apply.apply = time.Since(start)
	start = time.Now()
	for _, p := range delta {
		if ok, err := table.Lift(p, bpf.BanOriginCrowdSec); err != nil || !ok {
			return nil, apply, nil, fmt.Errorf("lift %s: %v, %v", p, ok, err)
		}
	}
	apply.lift = time.Since(start)
	if apply.memory, err = table.Memory(); err != nil {
		return nil, apply, nil, err
	}
	v4, v6 := table.InForce()
	note := fmt.Sprintf("bans: %d in force (%d IPv4, %d IPv6: the cases' %d, the rest half /32 or /128, a quarter /24 or /64, a quarter /16 or /48, none in a case's bucket), default max %d per family; "+
		"the ban maps take %.1f MiB of kernel memory (memlock), preallocated for max + %d allowed prefixes per family",
		v4+v6, v4, v6, len(fixed.entries), bpf.DefaultBanMax, float64(apply.memory)/(1<<20), bpf.MaxBanAllow)
	return results, apply, append([]string{note}, notes...), nil
}

// bpftoolRepeat and bpftoolRounds are how the bpftool prog run
// measurement repeats: the kernel's mean of 2,000,000 runs of one frame.
const (
	bpftoolRepeat = 2_000_000
	bpftoolRounds = 5
)

// bpftoolWay times each case as `bpftool prog run ... repeat 2000000`
// does: the first load with bans against the first without, the kernel's
// own mean (whole ns), a few rounds, the order swapped each round.
func bpftoolWay(progs [][]*ebpf.Program, fs []benchFrame, quick bool) ([]string, error) {
	repeat := uint32(bpftoolRepeat)
	if quick {
		repeat = 1 << 16
	}
	var notes []string
	err := onLockedThread(func() error {
		for _, fr := range fs {
			var with, without, deltas []float64
			for r := 0; r < bpftoolRounds; r++ {
				var ns [2]float64
				for k := range 2 {
					i := (k + r) % 2
					prog := progs[banProgNone][0]
					if i == 1 {
						prog = progs[banProgFull][0]
					}
					tr, _, err := runRetrying(prog, fr.frame, repeat)
					if err != nil {
						return fmt.Errorf("bpftool's way on %s: %w", fr, err)
					}
					ns[i] = float64(tr.duration.Nanoseconds())
				}
				without, with, deltas = append(without, ns[0]), append(with, ns[1]), append(deltas, ns[1]-ns[0])
			}
			notes = append(notes, fmt.Sprintf("as bpftool prog run times it (%d repeats, the kernel's mean, %d rounds), %s: %.0f ns against %.0f ns without bans, %+.0f ns (rounds %+.0f…%+.0f)",
				repeat, bpftoolRounds, fr.name, median(with), median(without), median(deltas), slices.Min(deltas), slices.Max(deltas)))
		}
		return nil
	})
	return notes, err
}
