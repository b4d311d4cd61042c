//go:build linux

package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/influxdata/telegraf/testutil"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// prefixFileBenchPrefixes is the size of the benchmark's prefix file.
const prefixFileBenchPrefixes = 100_000

// targetPrefixFileSwap bounds the time from a prefix file's change to the
// new set in force on the interface.
const targetPrefixFileSwap = 2 * time.Second

// targetPrefixFileMemory bounds the memory during a swap against the
// steady state, kernel rule maps and process RSS alike.
const targetPrefixFileMemory = 2.0

type prefixFileResult struct {
	ifaces     int
	prefixes   int
	swaps      int
	parse      time.Duration // median, ParsePrefixFile of the file alone
	swap       time.Duration // median, the gather that notices the change, through to the set in force
	worst      time.Duration
	ruleMemory uint64 // kernel memory of one set's rule maps
	rssSteady  uint64 // process RSS with the set in force, after a GC
	rssPeak    uint64 // highest RSS during the swaps
}

// prefixListFile writes n random IPv4 /24s, one a line, as a list feed
// serves them, with a Spamhaus-style comment on each.
func prefixListFile(path string, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	seen := make(map[netip.Prefix]bool, n)
	var b bytes.Buffer
	b.WriteString("; benchmark list " + strconv.FormatUint(seed, 10) + "\n")
	for len(seen) < n {
		a := netip.AddrFrom4([4]byte{byte(rng.IntN(223) + 1), byte(rng.IntN(256)), byte(rng.IntN(256)), 0})
		p := netip.PrefixFrom(a, 24)
		if seen[p] {
			continue
		}
		seen[p] = true
		fmt.Fprintf(&b, "%s ; SBL%d\n", p, len(seen))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// prefixFileSwap runs the plugin on ifaces interfaces with a drop rule fed
// from a file of 100,000 prefixes, replaces the file by rename with
// another 100,000 and times the gather that puts it in force, as an
// operator's cron job and Telegraf would; the process's RSS peak during the
// swaps is taken against its steady state with one set in force.
func prefixFileSwap(e *env, swaps, ifaces int) (prefixFileResult, error) {
	r := prefixFileResult{ifaces: ifaces, prefixes: prefixFileBenchPrefixes, swaps: swaps}
	var devs []string
	for i := range ifaces {
		dev := fmt.Sprintf("xdpbpf%d", i)
		if _, _, err := e.ns.AddVeth(dev, dev+"p"); err != nil {
			return r, err
		}
		defer e.ns.DelLink(dev)
		devs = append(devs, dev)
	}
	dir, err := os.MkdirTemp("", "xdpdrop-bench-list")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	list := filepath.Join(dir, "drop.txt")
	if err := prefixListFile(list, r.prefixes, 0); err != nil {
		return r, err
	}

	raw, err := os.ReadFile(list)
	if err != nil {
		return r, err
	}
	var parses []time.Duration
	for range 5 {
		start := time.Now()
		if _, _, err := xdp_drop.ParsePrefixFile(bytes.NewReader(raw), list); err != nil {
			return r, err
		}
		parses = append(parses, time.Since(start))
	}
	r.parse = medianDuration(parses)

	p := xdp_drop.New()
	p.Interfaces, p.Log, p.HandoverTimeout = devs, testutil.Logger{Quiet: true}, 0
	p.Rules = []xdp_drop.Rule{{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}}}
	if err := p.Init(); err != nil {
		return r, err
	}
	acc := &testutil.Accumulator{}
	if err := e.ns.Do(func() error { return p.Start(acc) }); err != nil {
		return r, err
	}
	defer e.ns.Do(func() error { p.Stop(); return nil })
	if len(acc.Errors) > 0 {
		return r, acc.Errors[0]
	}

	rules, err := oneSetMemory(list)
	if err != nil {
		return r, err
	}
	r.ruleMemory = rules

	// The next versions are written before the clock starts: the time is
	// the plugin's, from the change to the set in force.
	for i := 1; i <= swaps; i++ {
		if err := prefixListFile(filepath.Join(dir, fmt.Sprintf("v%d.txt", i)), r.prefixes, uint64(i)); err != nil {
			return r, err
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	if r.rssSteady, err = procStatus("VmRSS"); err != nil {
		return r, err
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return r, fmt.Errorf("reset the peak RSS: %w", err)
	}
	var times []time.Duration
	for i := 1; i <= swaps; i++ {
		if err := os.Rename(filepath.Join(dir, fmt.Sprintf("v%d.txt", i)), list); err != nil {
			return r, err
		}
		acc := &testutil.Accumulator{}
		start := time.Now()
		err := e.ns.Do(func() error { return p.Gather(acc) })
		took := time.Since(start)
		if err != nil {
			return r, err
		}
		if len(acc.Errors) > 0 {
			return r, acc.Errors[0]
		}
		if got := ruleField(acc, "prefixes"); got != int64(r.prefixes) {
			return r, fmt.Errorf("swap %d: %d prefixes in force, want %d", i, got, r.prefixes)
		}
		if n := pointsOf(acc, xdp_drop.MeasurementRule); n != ifaces {
			return r, fmt.Errorf("swap %d: %d interfaces report the rule, want %d", i, n, ifaces)
		}
		times = append(times, took)
	}
	if r.rssPeak, err = procStatus("VmHWM"); err != nil {
		return r, err
	}
	r.swap, r.worst = medianDuration(times), slices.Max(times)
	return r, nil
}

// oneSetMemory is the kernel memory of the rule maps of the file's set,
// loaded apart: a swap holds the old and the new set until the link
// update, so twice this at most, for equal sets.
func oneSetMemory(list string) (uint64, error) {
	f, err := os.Open(list)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	prefixes, _, err := xdp_drop.ParsePrefixFile(f, list)
	if err != nil {
		return 0, err
	}
	prog, err := bpf.Load(bpf.Policy{Rules: []bpf.Rule{{Name: "blocklist", Drop: true, SrcPrefixes: prefixes}}})
	if err != nil {
		return 0, err
	}
	defer prog.Close()
	return prog.RuleMemory()
}

func ruleField(acc *testutil.Accumulator, field string) int64 {
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == xdp_drop.MeasurementRule {
			if v, ok := m.GetField(field); ok {
				n, _ := v.(int64)
				return n
			}
		}
	}
	return -1
}

func pointsOf(acc *testutil.Accumulator, measurement string) int {
	n := 0
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == measurement {
			n++
		}
	}
	return n
}

// procStatus reads a size (kB) of /proc/self/status, in bytes.
func procStatus(key string) (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", key)
}

func (r *prefixFileResult) rows() []string {
	kernel := 2 * r.ruleMemory
	rss := float64(r.rssPeak) / float64(r.rssSteady)
	return []string{
		fmt.Sprintf("| prefix file swap | %d IPv4 prefixes, file replaced by rename, %d interface%s | gather that puts it in force: median %s, worst %s of %d (parsing alone %s) | — | — | ≤ %s | %s |",
			r.prefixes, r.ifaces, plural(r.ifaces), round(r.swap), round(r.worst), r.swaps, round(r.parse), targetPrefixFileSwap,
			met(r.worst <= targetPrefixFileSwap, fmt.Sprintf("%s over", round(r.worst-targetPrefixFileSwap)))),
		fmt.Sprintf("| prefix file swap memory | %d interface%s | kernel rule maps %.1f MB per set (one set serves every interface once swapped), %.1f MB while old and new are held (2.00×); process RSS %.1f MB steady, %.1f MB peak during the swaps | — | %.2f× RSS | ≤ %.0f× | %s |",
			r.ifaces, plural(r.ifaces), float64(r.ruleMemory)/1e6, float64(kernel)/1e6, float64(r.rssSteady)/1e6, float64(r.rssPeak)/1e6, rss, targetPrefixFileMemory,
			met(rss <= targetPrefixFileMemory, fmt.Sprintf("%.2f× over", rss-targetPrefixFileMemory))),
	}
}
