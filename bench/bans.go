//go:build linux

package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
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

// banBenchSources are the frames' sources: per family one in no ban but in
// a bucket with a /32 (/128) and a range (so that the lookup probes and
// misses), and one banned.
var banBenchSources = []struct{ name, src string }{
	{"IPv4/UDP, source not banned", "198.51.100.1"},
	{"IPv4/UDP, source banned (/32)", "198.51.7.7"},
	{"IPv6/UDP, source not banned", "2001:db8:100::1"},
	{"IPv6/UDP, source banned (/48)", "2001:db8:9::1"},
}

// fillBans puts banBenchCount bans in t, half of each family: half /32
// (/128), a quarter /24 and /16 (/64 and /48) each, random but for those
// the frames' sources meet, and none over the not-banned sources.
func fillBans(t *bpf.BanTable, seed uint64) error {
	end := time.Now().Add(24 * time.Hour)
	keep := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:100::/48")}
	fixed := []string{"198.51.7.7/32", "198.51.9.0/24", "2001:db8:100::7/128", "2001:db8:100:5::/64", "2001:db8:9::/48"}
	n := 0
	for _, p := range fixed {
		if _, err := t.Ban(netip.MustParsePrefix(p), end, bpf.BanOriginCrowdSec); err != nil {
			return err
		}
		n++
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	lens4, lens6 := []int{32, 32, 24, 16}, []int{128, 128, 64, 48}
	for i := 0; n < banBenchCount; i++ {
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
		if keep[0].Overlaps(p) || keep[1].Overlaps(p) {
			continue
		}
		o, err := t.Ban(p, end, bpf.BanOriginCrowdSec)
		if err != nil {
			return err
		}
		if o == bpf.BanAdded {
			n++
		}
	}
	return nil
}

// bansPerPacket measures, paired round by round, the program with
// banBenchCount bans in force against the same program without bans, on a
// frame from a source not banned and one banned, per family; and the time
// to apply banBenchDelta new bans and lift them.
func bansPerPacket(cfg perPacketConfig) ([]samplingResult, banApply, []string, error) {
	var apply banApply
	names := []string{"no bans", fmt.Sprintf("%d bans in force", banBenchCount)}
	progs := make([][]*ebpf.Program, len(names))
	var loaded []*bpf.Program
	defer func() {
		for _, p := range loaded {
			p.Close()
		}
	}()
	var table *bpf.BanTable
	for c := 0; c < cfg.copies; c++ {
		for i, policy := range []bpf.Policy{{}, {Bans: bpf.BansConfig{On: true}}} {
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
			if err := fillBans(t, uint64(c)); err != nil {
				return nil, apply, nil, err
			}
			table = t
		}
	}
	var fs []benchFrame
	for _, s := range banBenchSources {
		src := netip.MustParseAddr(s.src)
		var frame []byte
		var class bpf.Class
		if src.Is4() {
			l3 := frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)), src, netip.MustParseAddr("192.0.2.53"))
			frame, class = frames.Ether(frames.EtherIPv4, l3), bpf.IPv4Class(frames.ProtoUDP)
		} else {
			l3 := frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(18)), src, netip.MustParseAddr("2001:db8::53"))
			frame, class = frames.Ether(frames.EtherIPv6, l3), bpf.IPv6Class(frames.ProtoUDP)
		}
		fs = append(fs, benchFrame{s.name, frame, class, false})
	}
	t, err := timeRounds(names, progs, func(int, int) bool { return true }, fs, cfg, true)
	if err != nil {
		return nil, apply, nil, err
	}
	var results []samplingResult
	for f, s := range banBenchSources {
		want := uint32(xdpPass)
		if s.name[len(s.name)-1] == ')' {
			want = xdpDrop
		}
		if got := t.verdicts[0][f]; got != xdpPass {
			return nil, apply, nil, fmt.Errorf("no bans on %s: verdict %s, want XDP_PASS", s.name, actionName(got))
		}
		if got := t.verdicts[1][f]; got != want {
			return nil, apply, nil, fmt.Errorf("bans on %s: verdict %s, want %s", s.name, actionName(got), actionName(want))
		}
		pd := paired(t.perFrame[1][f], t.perFrame[0][f], cfg.copies)
		results = append(results, samplingResult{
			name: names[1], base: names[0], frame: fs[f].String(),
			ours: median(t.perFrame[1][f]), bare: median(t.perFrame[0][f]),
			delta: pd.median, q1: pd.q1, q3: pd.q3, target: targetBanNs,
		})
	}

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
	note := fmt.Sprintf("bans: %d in force (%d IPv4, %d IPv6: half /32 or /128, a quarter /24 or /64, a quarter /16 or /48), default max %d per family; "+
		"the ban maps take %.1f MiB of kernel memory (memlock), preallocated for max + %d allowed prefixes per family",
		v4+v6, v4, v6, bpf.DefaultBanMax, float64(apply.memory)/(1<<20), bpf.MaxBanAllow)
	return results, apply, []string{note}, nil
}
