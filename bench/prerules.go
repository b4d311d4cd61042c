//go:build linux

package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// beforeRulesObject is the compiled object of the program before rules, a
// fixed baseline: it was taken as is from the last commit before rules with
//
//	git show 7843351:bpf/xdpdrop_bpfel.o > bench/testdata/before-rules.o
//
// and is never rebuilt, so that the comparison stays with that program
// whatever the compiler or the source become.
//
//go:embed testdata/before-rules.o
var beforeRulesObject []byte

// beforeRulesDrop is VERDICT_DROP of the program before rules: its verdict
// table held 1 for a dropped class and 0 for a passed one, and it kept one
// counter per class.
const beforeRulesDrop = 1

// beforeRules is the program before rules, loaded from beforeRulesObject.
type beforeRules struct {
	Prog     *ebpf.Program `ebpf:"xdp_drop"`
	Counters *ebpf.Map     `ebpf:"counters"`
}

// loadBeforeRules loads the program before rules with the verdicts of
// policy (its drop list; rules it never had).
func loadBeforeRules(policy bpf.Policy) (*beforeRules, error) {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(beforeRulesObject))
	if err != nil {
		return nil, fmt.Errorf("program before rules: %w", err)
	}
	// Its classes are numbered as today's (IPv4 + protocol, IPv6 +
	// protocol, then the six others): if they ever change, this must map them.
	v, ok := spec.Variables["verdicts"]
	if !ok || v.Size() != uint32(bpf.ClassCount) {
		return nil, fmt.Errorf("program before rules: its verdict table does not have the %d classes of this build: map its classes before comparing", bpf.ClassCount)
	}
	var verdicts [bpf.ClassCount]uint8
	for c := range verdicts {
		if policy.Drops(bpf.Class(c)) {
			verdicts[c] = beforeRulesDrop
		}
	}
	if err := v.Set(verdicts); err != nil {
		return nil, fmt.Errorf("program before rules: set verdicts: %w", err)
	}
	var b beforeRules
	if err := spec.LoadAndAssign(&b, nil); err != nil {
		return nil, fmt.Errorf("load program before rules: %w", err)
	}
	if got, want := b.Counters.ValueSize(), uint32(unsafe.Sizeof(bpf.Counters{})); got != want {
		b.Close()
		return nil, fmt.Errorf("program before rules: counter block of %d bytes, want %d (one counter per class)", got, want)
	}
	return &b, nil
}

// ReadCounters sums the counters of every CPU into dst.
func (b *beforeRules) ReadCounters(dst *bpf.Counters) error {
	var perCPU []bpf.Counters
	if err := b.Counters.Lookup(uint32(0), &perCPU); err != nil {
		return fmt.Errorf("program before rules: read counters: %w", err)
	}
	*dst = bpf.Counters{}
	for _, cpu := range perCPU {
		for c := range cpu {
			dst[c].Packets += cpu[c].Packets
			dst[c].Bytes += cpu[c].Bytes
		}
	}
	return nil
}

func (b *beforeRules) Close() error {
	b.Prog.Close()
	return b.Counters.Close()
}

// preRulesResult is today's program without rules against the program
// before rules under the same policy, on one frame.
type preRulesResult struct {
	frame, policy, verdict string
	ours, before           float64     // median ns per frame
	delta                  pairedDelta // ours - before, round by round
	self                   pairedDelta // ours (second loads) - ours: the noise
}

// noise is the half-width of the interquartile range of today's program
// against a second set of loads of itself in the same rounds.
func (r preRulesResult) noise() float64 { return (r.self.q3 - r.self.q1) / 2 }

// withinNoise is the target: the median paired delta against the program
// before rules is no further from zero than noise.
func (r preRulesResult) withinNoise() bool { return math.Abs(r.delta.median) <= r.noise() }

// preRules measures today's program, loaded with a policy without rules
// (drop all, and the drop list of perPacket), against the program before
// rules under the same policy, paired round by round. A second set of loads
// of today's program, measured against the first in the same rounds, gives
// the noise the difference is held to. The programs take turns in an order
// reversed every other pass and rotated, so that each takes every place.
func preRules(e *env, cfg perPacketConfig) ([]preRulesResult, []string, error) {
	policies := []struct {
		name   string
		policy bpf.Policy
	}{{"drop all", bpf.Policy{DropAll: true}}, {listPolicyName, listPolicy}}
	// Per policy p, programs 3p (before rules), 3p+1 (ours), 3p+2 (ours, second loads).
	const before, ours, again = 0, 1, 2
	names := make([]string, 3*len(policies))
	progs := make([][]*ebpf.Program, len(names))
	counted := make([][]counterReader, len(names))
	var closers []io.Closer
	defer func() {
		// Out of the dispatcher before the next section, then unloaded.
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
	}()
	for p, pol := range policies {
		names[3*p+before] = "before rules, " + pol.name
		names[3*p+ours] = pol.name
		names[3*p+again] = pol.name + " (second loads)"
	}
	for i := 0; i < cfg.copies; i++ {
		for p, pol := range policies {
			for k := range 3 {
				c := 3*p + k
				if k == before {
					b, err := loadBeforeRules(pol.policy)
					if err != nil {
						return nil, nil, err
					}
					closers = append(closers, b)
					progs[c] = append(progs[c], b.Prog)
					counted[c] = append(counted[c], b)
				} else {
					o, err := bpf.Load(pol.policy)
					if err != nil {
						return nil, nil, fmt.Errorf("%s: %w", names[c], err)
					}
					closers = append(closers, o)
					progs[c] = append(progs[c], o.XDP())
					counted[c] = append(counted[c], o)
				}
				l, err := e.keepInDispatcher(progs[c][i])
				if err != nil {
					return nil, nil, err
				}
				closers = append(closers, l)
			}
		}
	}

	var fs []benchFrame
	for _, fr := range perPacketFrames() {
		if !fr.jumbo {
			fs = append(fs, fr)
		}
	}
	t, err := timeRounds(names, progs, func(int, int) bool { return true }, fs, cfg, true)
	if err != nil {
		return nil, nil, err
	}

	// Every frame got its verdict from every program, and was counted
	// exactly under its class in every load of each.
	for p, pol := range policies {
		for f, fr := range fs {
			want := uint32(xdpPass)
			if pol.policy.Drops(fr.class) {
				want = xdpDrop
			}
			for k := range 3 {
				if got := t.verdicts[3*p+k][f]; got != want {
					return nil, nil, fmt.Errorf("%s on %s: verdict %s, want %s", names[3*p+k], fr, actionName(got), actionName(want))
				}
			}
		}
	}
	// A run a signal interrupted counted an unknown part of its frames
	// before it was repeated: only that load is checked as at least the runs made.
	partial := 0
	for c := range progs {
		for i, r := range counted[c] {
			rounds := cfg.rounds / cfg.copies
			if i < cfg.rounds%cfg.copies {
				rounds++
			}
			atLeast := t.interruptedLoad[c][i] > 0
			if atLeast {
				partial++
			}
			if err := checkPerPacketCounters(names[c], r, fs, uint64(rounds)*uint64(cfg.repeat), atLeast); err != nil {
				return nil, nil, err
			}
		}
	}

	var results []preRulesResult
	for p, pol := range policies {
		b, o, a := 3*p+before, 3*p+ours, 3*p+again
		for f, fr := range fs {
			results = append(results, preRulesResult{
				frame: fr.String(), policy: pol.name, verdict: actionName(t.verdicts[o][f]),
				ours: median(t.perFrame[o][f]), before: median(t.perFrame[b][f]),
				delta: paired(t.perFrame[o][f], t.perFrame[b][f], cfg.copies),
				self:  paired(t.perFrame[a][f], t.perFrame[o][f], cfg.copies),
			})
		}
	}
	var notes []string
	for _, r := range results {
		notes = append(notes, fmt.Sprintf("noise, %s, %s: second loads − first, paired by round: %+.2f ns (IQR %+.2f…%+.2f; loads %+.2f…%+.2f), half the IQR %.2f ns",
			r.policy, r.frame, r.self.median, r.self.q1, r.self.q3, r.self.loadLo, r.self.loadHi, r.noise()))
	}
	check := "counters checked: every run of ours and of the program before rules counted exactly under its frame's class, in every load"
	if partial > 0 {
		check = fmt.Sprintf("counters checked: every run counted exactly under its frame's class in %d of the %d loads; in the other %d a signal interrupted %d runs, repeated, and they were checked as at least the runs made",
			cfg.copies*len(progs)-partial, cfg.copies*len(progs), partial, t.interrupted)
	}
	return results, append(notes, check), nil
}
