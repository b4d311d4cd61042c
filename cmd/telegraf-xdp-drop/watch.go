package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/influxdata/telegraf"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// watch attaches per the config and prints, every interval, drops and passes
// per second per interface and protocol, the way samples/bpf/xdp1 printed
// "proto 17: 20403027 drops/s", until SIGINT or SIGTERM; then it detaches.
func watch(plugin *xdp_drop.XDPDrop, out io.Writer, interval time.Duration, log *levelWriter) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	errs := errorLog{log: log}
	if err := plugin.Start(errs); err != nil {
		return err
	}
	defer plugin.Stop()

	clear := isTerminal(out)
	prev := map[xdp_drop.SeriesKey]sample{}
	last := time.Now()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Infof("stopped: %v", context.Cause(ctx))
			return nil
		case <-ticker.C:
		}
		snap := plugin.Snapshot(errs)
		now := time.Now()
		screen := render(snap, prev, now.Sub(last), now, interval)
		last = now
		if clear {
			screen = "\x1b[H\x1b[2J" + screen
		} else {
			screen += "\n"
		}
		if _, err := io.WriteString(out, screen); err != nil {
			return err
		}
	}
}

// sample is a series' counters at the last screen.
type sample struct{ packets, bytes uint64 }

// rates are packets and bytes per second.
type rates struct{ pps, bps float64 }

// render draws one screen, at most 80 columns wide, and updates prev to the
// current totals.
func render(snap xdp_drop.Snapshot, prev map[xdp_drop.SeriesKey]sample, elapsed time.Duration, now time.Time, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xdp_drop watch  %s  every %v  (Ctrl-C detaches and quits)\n", now.Format("2006-01-02 15:04:05"), interval)
	const row = "%-12.12s %-6s %-11.11s %-10s %12s %10s %11s\n"
	fmt.Fprintf(&b, row, "INTERFACE", "FAMILY", "PROTOCOL", "ACTION", "PKTS/S", "BYTES/S", "TOTAL PKTS")

	type line struct {
		key   xdp_drop.SeriesKey
		label string
		rates
		total float64
	}
	lines := make([]line, 0, len(snap.Series))
	totals := map[string]rates{}
	seconds := elapsed.Seconds()
	for _, s := range snap.Series {
		was, seen := prev[s.SeriesKey]
		if !seen || s.Packets < was.packets { // new series, or counters restarted
			was = sample{}
		}
		r := rates{float64(s.Packets-was.packets) / seconds, float64(s.Bytes-was.bytes) / seconds}
		prev[s.SeriesKey] = sample{s.Packets, s.Bytes}
		lines = append(lines, line{s.SeriesKey, seriesLabel(s.SeriesKey), r, float64(s.Packets)})
		t := totals[s.Action]
		totals[s.Action] = rates{t.pps + r.pps, t.bps + r.bps}
	}
	sort.Slice(lines, func(i, j int) bool {
		if lines[i].label != lines[j].label {
			return lines[i].label < lines[j].label
		}
		return lines[i].pps > lines[j].pps || lines[i].pps == lines[j].pps && lines[i].key.Protocol < lines[j].key.Protocol
	})
	for _, l := range lines {
		fmt.Fprintf(&b, row, l.label, l.key.Family, l.key.Protocol, l.key.Action, count(l.pps), rate(l.bps), count(l.total))
	}
	for _, action := range xdp_drop.Actions {
		if t, ok := totals[action]; ok {
			b.WriteString(strings.TrimRight(fmt.Sprintf(row, "total", "", "", action, count(t.pps), rate(t.bps), ""), " \n") + "\n")
		}
	}
	for _, l := range snap.Links {
		b.WriteString(linkText(l) + "\n")
	}
	return b.String()
}

// seriesLabel names a series' interface, with its queue and CPU when the
// optional views are on ("eth1/q3/c0"), so each has its own row.
func seriesLabel(k xdp_drop.SeriesKey) string {
	name := k.Interface
	if k.RxQueue != "" {
		name += "/q" + k.RxQueue
	}
	if k.CPU != "" {
		name += "/c" + k.CPU
	}
	return name
}

func linkText(l xdp_drop.Link) string {
	if l.Attached {
		mode := l.Mode + " mode"
		if l.Fallback {
			mode += " (auto fell back)"
		}
		return fmt.Sprintf("link %s: attached, %s, program id %d", l.Interface, mode, l.ProgramID)
	}
	msg := fmt.Sprintf("link %s: NOT attached: %s", l.Interface, l.Error)
	if len(msg) > 79 {
		msg = msg[:76] + "..."
	}
	return msg
}

// count formats a number with thousands separators.
func count(v float64) string {
	s := strconv.FormatUint(uint64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// rate formats bytes per second with a binary-free SI unit.
func rate(bps float64) string {
	for _, u := range []string{"B/s", "kB/s", "MB/s", "GB/s"} {
		if bps < 1000 || u == "GB/s" {
			return fmt.Sprintf("%.1f %s", bps, u)
		}
		bps /= 1000
	}
	return ""
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// errorLog is the accumulator the watch view hands the plugin: Start and
// Snapshot report only errors through it, which it logs. It emits no
// points, so the other methods are left to the nil interface.
type errorLog struct {
	telegraf.Accumulator
	log *levelWriter
}

func (e errorLog) AddError(err error) { e.log.Errorf("%v", err) }
