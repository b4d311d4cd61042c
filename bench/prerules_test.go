//go:build linux

package main

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// The baseline object loads, takes a policy's verdicts and counts every
// frame exactly under its class, as the program before rules did.
func TestBeforeRulesBaseline(t *testing.T) {
	testns.RequirePrivileged(t)
	fs := perPacketFrames()
	v4, v6, qinq := fs[0], fs[1], fs[2]
	for _, tc := range []struct {
		name   string
		policy bpf.Policy
		want   map[string]uint32 // verdict by frame name
	}{
		{"drop all", bpf.Policy{DropAll: true}, map[string]uint32{v4.String(): xdpDrop, v6.String(): xdpDrop, qinq.String(): xdpDrop}},
		{listPolicyName, listPolicy, map[string]uint32{v4.String(): xdpDrop, v6.String(): xdpPass, qinq.String(): xdpDrop}},
		{"drop nothing", bpf.Policy{}, map[string]uint32{v4.String(): xdpPass, v6.String(): xdpPass, qinq.String(): xdpPass}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := loadBeforeRules(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var want bpf.Counters
			for i, fr := range []benchFrame{v4, v6, qinq} {
				n := uint32(10 + i)
				ret, err := b.Prog.Run(&ebpf.RunOptions{Data: fr.frame, Repeat: n})
				if err != nil {
					t.Fatal(err)
				}
				if ret != tc.want[fr.String()] {
					t.Errorf("%s: verdict %s, want %s", fr, actionName(ret), actionName(tc.want[fr.String()]))
				}
				want[fr.class].Packets += uint64(n)
				want[fr.class].Bytes += uint64(n) * uint64(len(fr.frame))
			}
			var got bpf.Counters
			if err := b.ReadCounters(&got); err != nil {
				t.Fatal(err)
			}
			for c := range got {
				if got[c] != want[c] {
					t.Errorf("class %d: counted %+v, want %+v", c, got[c], want[c])
				}
			}
		})
	}
}

// Over a cycle of passes, the rotated turn puts every program in every
// place equally often; without rotation it only reverses.
func TestTurn(t *testing.T) {
	const n = 6
	order := make([]int, n)
	var places [n][n]int // places[program][place]
	for pass := 0; pass < 2*n; pass++ {
		turn(order, pass, true)
		seen := slices.Clone(order)
		slices.Sort(seen)
		if !slices.Equal(seen, []int{0, 1, 2, 3, 4, 5}) {
			t.Fatalf("pass %d: order %v is not every program once", pass, order)
		}
		for place, c := range order {
			places[c][place]++
		}
	}
	for c := range places {
		for place, k := range places[c] {
			if k != 2 {
				t.Errorf("program %d took place %d %d times in %d passes, want 2", c, place, k, 2*n)
			}
		}
	}
	for pass, want := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5}} {
		if turn(order, pass, false); !slices.Equal(order, want) {
			t.Errorf("pass %d without rotation: order %v, want %v", pass, order, want)
		}
	}
}

// paired takes the differences round by round, and the loads' medians from
// the rounds of each load.
func TestPaired(t *testing.T) {
	a := []float64{10, 20, 13, 24, 11, 22, 14, 26}
	b := []float64{9, 21, 10, 20, 10, 20, 10, 20}
	// Differences: 1 -1 3 4 1 2 4 6; load 0 (even rounds): 1 3 1 4, load 1: -1 4 2 6.
	p := paired(a, b, 2)
	if p.median != 2.5 || p.q1 != 1 || p.q3 != 4 || p.loadLo != 2 || p.loadHi != 3 {
		t.Errorf("paired = %+v, want median 2.5, IQR 1…4, loads 2…3", p)
	}
}

// The target holds when the median delta is within half the noise's IQR,
// either side of zero.
func TestWithinNoise(t *testing.T) {
	for _, tc := range []struct {
		delta float64
		want  bool
	}{{0, true}, {0.25, true}, {-0.25, true}, {0.26, false}, {-0.26, false}} {
		r := preRulesResult{delta: pairedDelta{median: tc.delta}, self: pairedDelta{q1: -0.5, q3: 0}}
		if got := r.withinNoise(); got != tc.want {
			t.Errorf("delta %+.2f, noise ±%.2f: within noise %v, want %v", tc.delta, r.noise(), got, tc.want)
		}
	}
}
