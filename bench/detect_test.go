//go:build linux

package main

import (
	"strings"
	"testing"
	"time"
)

// TestStepOf: the first frame dropped is found in the step that sent it,
// at each step's edges.
func TestStepOf(t *testing.T) {
	from := []uint64{0, 500, 1000, 1500}
	for n, want := range map[uint64]int{0: 0, 499: 0, 500: 1, 999: 1, 1000: 2, 1500: 3, 1999: 3} {
		if got := stepOf(from, n); got != want {
			t.Errorf("stepOf(%v, %d) = %d, want %d", from, n, got, want)
		}
	}
}

// TestDetectRows: a run that was never banned fails the time-to-ban row,
// and a background source banned fails the false-bans row.
func TestDetectRows(t *testing.T) {
	r := detectResult{pps: 5000, background: 4, bgSent: 100, bgPassed: 100, nsPerAdd: 300, runs: []detectRun{
		{banned: true, took: 1500 * time.Millisecond, rate: 50_000, backgroundPPS: 2500},
		{banned: true, took: 2500 * time.Millisecond, rate: 49_900, backgroundPPS: 2500},
	}}
	rows := r.rows()
	if !strings.Contains(rows[0], "median 2s, worst 2.5s of 2 runs") || !strings.HasSuffix(rows[0], "| yes |") {
		t.Errorf("time to ban row: %s", rows[0])
	}
	if !strings.HasSuffix(rows[1], "| yes |") || !strings.HasSuffix(rows[2], "| yes |") {
		t.Errorf("rows: %s\n%s", rows[1], rows[2])
	}
	r.runs = append(r.runs, detectRun{rate: 30_000})
	r.bgBanned = 1
	rows = r.rows()
	if !strings.Contains(rows[0], "**no**: 1 of 3 runs not banned") || !strings.Contains(rows[0], "short of 10× pps") {
		t.Errorf("time to ban row: %s", rows[0])
	}
	if !strings.Contains(rows[1], "**no**: 1 banned, 0 frames kept from the stack") {
		t.Errorf("false bans row: %s", rows[1])
	}
}
