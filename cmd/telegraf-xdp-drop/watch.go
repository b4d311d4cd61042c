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

	acc := &collector{log: log}
	if err := plugin.Start(acc); err != nil {
		return err
	}
	defer plugin.Stop()

	clear := isTerminal(out)
	prev := map[seriesKey]uint64{}
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
		acc.points = acc.points[:0]
		if err := plugin.Gather(acc); err != nil {
			return err
		}
		now := time.Now()
		screen := render(acc.points, prev, now.Sub(last), now, interval)
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

// seriesKey names one counter series: with per_cpu or per_queue, iface
// carries the CPU and queue too ("eth1/q3/c0"), so each has its own rate.
type seriesKey struct{ iface, family, protocol, action string }

type point struct {
	name   string
	tags   map[string]string
	fields map[string]any
}

// render draws one screen, at most 80 columns wide, and updates prev to the
// current totals.
func render(points []point, prev map[seriesKey]uint64, elapsed time.Duration, now time.Time, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xdp_drop watch  %s  every %v  (Ctrl-C detaches and quits)\n", now.Format("2006-01-02 15:04:05"), interval)
	const row = "%-12.12s %-6s %-11.11s %-10s %12s %10s %11s\n"
	fmt.Fprintf(&b, row, "INTERFACE", "FAMILY", "PROTOCOL", "ACTION", "PKTS/S", "BYTES/S", "TOTAL PKTS")

	type line struct {
		key             seriesKey
		pps, bps, total float64
	}
	var lines []line
	totals := map[string][2]float64{}
	var links []string
	seconds := elapsed.Seconds()
	for _, p := range points {
		if p.name == "xdp_drop_link" {
			links = append(links, linkText(p))
			continue
		}
		k := seriesKey{seriesIface(p.tags), p.tags["family"], p.tags["protocol"], p.tags["action"]}
		packets := toUint(p.fields["packets"])
		bytes := toUint(p.fields["bytes"])
		prevPackets, seen := prev[k]
		prevBytes := prev[seriesKey{k.iface, k.family, k.protocol, k.action + "/bytes"}]
		if !seen || packets < prevPackets { // new series, or counters restarted
			prevPackets, prevBytes = 0, 0
		}
		pps := float64(packets-prevPackets) / seconds
		bps := float64(bytes-prevBytes) / seconds
		prev[k] = packets
		prev[seriesKey{k.iface, k.family, k.protocol, k.action + "/bytes"}] = bytes
		lines = append(lines, line{k, pps, bps, float64(packets)})
		t := totals[k.action]
		totals[k.action] = [2]float64{t[0] + pps, t[1] + bps}
	}
	sort.Slice(lines, func(i, j int) bool {
		if lines[i].key.iface != lines[j].key.iface {
			return lines[i].key.iface < lines[j].key.iface
		}
		return lines[i].pps > lines[j].pps || lines[i].pps == lines[j].pps && lines[i].key.protocol < lines[j].key.protocol
	})
	for _, l := range lines {
		fmt.Fprintf(&b, row, l.key.iface, l.key.family, l.key.protocol, l.key.action, count(l.pps), rate(l.bps), count(l.total))
	}
	for _, action := range []string{"drop", "would_drop", "pass"} {
		if t, ok := totals[action]; ok {
			b.WriteString(strings.TrimRight(fmt.Sprintf(row, "total", "", "", action, count(t[0]), rate(t[1]), ""), " \n") + "\n")
		}
	}
	for _, l := range links {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func seriesIface(tags map[string]string) string {
	name := tags["interface"]
	if q, ok := tags["rx_queue"]; ok {
		name += "/q" + q
	}
	if c, ok := tags["cpu"]; ok {
		name += "/c" + c
	}
	return name
}

func linkText(p point) string {
	iface, mode := p.tags["interface"], p.tags["mode"]
	if p.fields["attached"] == true {
		mode += " mode"
		if p.fields["fallback"] == true {
			mode += " (auto fell back)"
		}
		return fmt.Sprintf("link %s: attached, %s, program id %v", iface, mode, p.fields["program_id"])
	}
	msg := fmt.Sprintf("link %s: NOT attached: %v", iface, p.fields["error"])
	if len(msg) > 79 {
		msg = msg[:76] + "..."
	}
	return msg
}

func toUint(v any) uint64 {
	switch n := v.(type) {
	case uint64:
		return n
	case int64:
		return uint64(n)
	}
	return 0
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

// collector is the accumulator of the watch view: it keeps one gather's
// points and logs errors.
type collector struct {
	points []point
	log    *levelWriter
}

func (c *collector) AddFields(name string, fields map[string]any, tags map[string]string, _ ...time.Time) {
	c.points = append(c.points, point{name, tags, fields})
}

func (c *collector) AddGauge(name string, f map[string]any, t map[string]string, ts ...time.Time) {
	c.AddFields(name, f, t, ts...)
}

func (c *collector) AddCounter(name string, f map[string]any, t map[string]string, ts ...time.Time) {
	c.AddFields(name, f, t, ts...)
}

func (c *collector) AddSummary(name string, f map[string]any, t map[string]string, ts ...time.Time) {
	c.AddFields(name, f, t, ts...)
}

func (c *collector) AddHistogram(name string, f map[string]any, t map[string]string, ts ...time.Time) {
	c.AddFields(name, f, t, ts...)
}

func (c *collector) AddMetric(m telegraf.Metric) { c.AddFields(m.Name(), m.Fields(), m.Tags()) }

func (*collector) SetPrecision(time.Duration) {}

func (c *collector) AddError(err error) { c.log.Errorf("%v", err) }

// WithTracking is not used by this plugin.
func (*collector) WithTracking(int) telegraf.TrackingAccumulator { return nil }
