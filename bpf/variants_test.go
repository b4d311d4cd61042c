//go:build linux

package bpf_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// allFeatures are every feature bit the package names.
const allFeatures = bpf.FeatureRules | bpf.FeatureMultiBuffer | bpf.FeatureSampling | bpf.FeatureLimit | bpf.FeatureBans

// TestProgramVariantsTable: the table has a program for every feature set
// but a limit without rules, each program of the ELF once, in the section
// of its buffers (xdp.frags for multi-buffer), and names the sets it has
// when asked for another.
func TestProgramVariantsTable(t *testing.T) {
	have := bpf.ProgramVariants()
	for f := bpf.Features(0); f <= allFeatures<<1; f++ {
		want := f&^allFeatures == 0 && (f&bpf.FeatureLimit == 0 || f&bpf.FeatureRules != 0)
		require.Equal(t, want, slices.Contains(have, f), "features %s in the table", f)
		name, err := bpf.ProgramOf(f)
		if want {
			require.NoError(t, err, "features %s", f)
			require.NotEmpty(t, name, "features %s", f)
		} else {
			require.Error(t, err, "features %s", f)
		}
	}
	var named []string
	for _, f := range have {
		name, err := bpf.ProgramOf(f)
		require.NoError(t, err)
		named = append(named, name)
		section, err := bpf.ProgramSection(name)
		require.NoError(t, err)
		want := "xdp"
		if f&bpf.FeatureMultiBuffer != 0 {
			want = "xdp.frags"
		}
		require.Equal(t, want, section, "section of %s, the program of %s", name, f)
	}
	progs, err := bpf.EmbeddedPrograms()
	require.NoError(t, err)
	slices.Sort(named)
	require.Equal(t, progs, named, "the table names every program of the ELF once")
	_, err = bpf.ProgramOf(bpf.FeatureLimit)
	require.EqualError(t, err, "no XDP program is compiled with the features limit: the programs have none, rules, multi-buffer, "+
		"rules+multi-buffer, sampling, rules+sampling, multi-buffer+sampling, rules+multi-buffer+sampling, rules+limit, "+
		"rules+multi-buffer+limit, rules+sampling+limit, rules+multi-buffer+sampling+limit, bans, rules+bans, multi-buffer+bans, "+
		"rules+multi-buffer+bans, sampling+bans, rules+sampling+bans, multi-buffer+sampling+bans, rules+multi-buffer+sampling+bans, "+
		"rules+limit+bans, rules+multi-buffer+limit+bans, rules+sampling+limit+bans, rules+multi-buffer+sampling+limit+bans")
}

// variantPolicy is a policy whose program has the features f, less
// multi-buffer: TCP dropped, other classes passed; with rules a rule
// dropping DNS, with a limit one limiting DNS to a burst of 1 instead;
// with sampling every frame sampled.
func variantPolicy(f bpf.Features) bpf.Policy {
	policy := bpf.Policy{Protocols: []uint8{frames.ProtoTCP}}
	if f&bpf.FeatureRules != 0 {
		policy.Rules = []bpf.Rule{{Name: "dns", Drop: true, Protocols: []uint8{frames.ProtoUDP}, DstPorts: ports(port(53))}}
	}
	if f&bpf.FeatureLimit != 0 {
		policy.Rules = []bpf.Rule{limitRule(bpf.Limit{Rate: 1, Burst: 1, PerRule: true})}
	}
	if f&bpf.FeatureBans != 0 {
		policy.Bans = bpf.BansConfig{On: true}
	}
	if f&bpf.FeatureSampling != 0 {
		policy.Sample = bpf.Sampling{Rate: 1, Actions: [bpf.ActionCount]bool{true, true}, MaxPerSecond: 1_000_000, Snaplen: 64}
	}
	return policy
}

// TestProgramVariants loads the program of every feature set of the table,
// as Load and UseMultiBuffer do, and runs frames through it: two DNS
// queries, a TCP frame and, multi-buffer only, a 9014-byte UDP frame over
// several buffers. Each feature shows in the verdicts and counters: the
// rule drops both queries, the limit the second, sampling sends every
// frame to the ring, multi-buffer counts the jumbo frame whole.
func TestProgramVariants(t *testing.T) {
	testns.RequirePrivileged(t)
	restore := bpf.UseLimitClock()
	defer restore()
	udp, tcp := bpf.IPv4Class(frames.ProtoUDP), bpf.IPv4Class(frames.ProtoTCP)
	dns, syn, jumbo := dnsFrom("198.51.100.1"), tcpFrame(60), udpFrame(9014)
	for _, f := range bpf.ProgramVariants() {
		t.Run(f.String(), func(t *testing.T) {
			p, err := bpf.Load(variantPolicy(f))
			require.NoError(t, err)
			defer p.Close()
			if f&bpf.FeatureMultiBuffer != 0 {
				require.NoError(t, p.UseMultiBuffer())
			}
			require.Equal(t, f, p.Features())
			if f&bpf.FeatureLimit != 0 {
				require.NoError(t, bpf.SetLimitClock(p, uint64(time.Hour)))
			}

			var want bpf.Block
			dnsVerdicts := []uint32{xdpPass, xdpPass}
			switch {
			case f&bpf.FeatureLimit != 0:
				dnsVerdicts = []uint32{xdpPass, xdpDrop}
				want.Class[udp][bpf.ActionPass] = bpf.Counter{Packets: 1, Bytes: uint64(len(dns))}
				want.Class[udp][bpf.ActionDrop] = bpf.Counter{Packets: 1, Bytes: uint64(len(dns))}
				want.Rule[0] = bpf.Counter{Packets: 2, Bytes: 2 * uint64(len(dns))}
				want.Limited[0] = bpf.Counter{Packets: 1, Bytes: uint64(len(dns))}
			case f&bpf.FeatureRules != 0:
				dnsVerdicts = []uint32{xdpDrop, xdpDrop}
				want.Class[udp][bpf.ActionDrop] = bpf.Counter{Packets: 2, Bytes: 2 * uint64(len(dns))}
				want.Rule[0] = bpf.Counter{Packets: 2, Bytes: 2 * uint64(len(dns))}
			default:
				want.Class[udp][bpf.ActionPass] = bpf.Counter{Packets: 2, Bytes: 2 * uint64(len(dns))}
			}
			want.Class[tcp][bpf.ActionDrop] = bpf.Counter{Packets: 1, Bytes: uint64(len(syn))}
			runs := []struct {
				frame   []byte
				verdict uint32
			}{{dns, dnsVerdicts[0]}, {dns, dnsVerdicts[1]}, {syn, xdpDrop}}
			if f&bpf.FeatureMultiBuffer != 0 {
				runs = append(runs, struct {
					frame   []byte
					verdict uint32
				}{jumbo, xdpPass})
				want.Class[udp][bpf.ActionPass].Packets++
				want.Class[udp][bpf.ActionPass].Bytes += uint64(len(jumbo))
			}
			for i, r := range runs {
				v, err := p.XDP().Run(&ebpf.RunOptions{Data: r.frame})
				require.NoError(t, err, "frame %d", i)
				require.Equal(t, r.verdict, v, "frame %d verdict", i)
			}
			var got bpf.Block
			require.NoError(t, p.ReadBlock(&got))
			require.Equal(t, counted(want), counted(got), "counters")

			var sent uint64
			if f&bpf.FeatureSampling != 0 {
				sent = uint64(len(runs))
			}
			counts, err := p.SampleCounts()
			require.NoError(t, err)
			require.Equal(t, bpf.SampleCounts{Sent: sent}, counts, "frames sampled")
		})
	}
}

// counted are the counters of b that are not zero, by name.
func counted(b bpf.Block) map[string]bpf.Counter {
	m := map[string]bpf.Counter{}
	for c := range b.Class {
		for a, n := range b.Class[c] {
			if n != (bpf.Counter{}) {
				m[fmt.Sprintf("class %d action %d", c, a)] = n
			}
		}
	}
	for r := range b.Rule {
		if b.Rule[r] != (bpf.Counter{}) {
			m[fmt.Sprintf("rule %d", r)] = b.Rule[r]
		}
		if b.Limited[r] != (bpf.Counter{}) {
			m[fmt.Sprintf("rule %d limited", r)] = b.Limited[r]
		}
	}
	return m
}
