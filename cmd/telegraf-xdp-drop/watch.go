package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/influxdata/telegraf"
	"golang.org/x/term"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// watch attaches per the config and prints, every interval, drops and passes
// per second per interface and protocol, the way samples/bpf/xdp1 printed
// "proto 17: 20403027 drops/s", and per rule, until SIGINT or SIGTERM; then
// it detaches. An interface that a running instance holds is observed
// (plugin.Run.Observe): its counters are read from that instance's program,
// which is left as it is. One that another tool's program holds, or an
// instance of another config, ends the view with an error.
func watch(plugin *xdp_drop.XDPDrop, out io.Writer, interval time.Duration, log *levelWriter) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	errs := &errorLog{log: log}
	if err := plugin.Start(errs); err != nil {
		return err
	}
	defer plugin.Stop()
	if errs.unwatchable != nil {
		return errs.unwatchable
	}

	clear := isTerminal(out)
	prev := newHistory()
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
		plugin.Reconcile(errs)
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

// ruleKey names one rule's series: rule names are unique per instance,
// and a limit rule has one series per action.
type ruleKey struct{ iface, rule, action string }

// history holds the counters of the last screen, from which the next one
// computes its rates.
type history struct {
	series map[xdp_drop.SeriesKey]sample
	rules  map[ruleKey]sample
	// shown: a screen was drawn, so the next one has counters to compute
	// rates from; the first has only totals, since an unknown time.
	shown bool
}

func newHistory() *history {
	return &history{series: map[xdp_drop.SeriesKey]sample{}, rules: map[ruleKey]sample{}}
}

// noRate stands in a rate column on the first screen, which has no earlier
// counters to take a rate from: their totals are cumulative since attach.
const noRate = "-"

// since returns the rates of counters now that were at was (if seen) the
// given seconds ago. Counters below their last value restarted (a new
// program) and count from zero, as do counters not seen before.
func since(was sample, seen bool, now sample, seconds float64) rates {
	if !seen || now.packets < was.packets || now.bytes < was.bytes {
		was = sample{}
	}
	if seconds <= 0 {
		return rates{}
	}
	return rates{float64(now.packets-was.packets) / seconds, float64(now.bytes-was.bytes) / seconds}
}

// The view's columns. A line takes at most width columns: one short of 80,
// since a line that fills the last column makes some terminals wrap it.
const (
	width         = 79
	labelWidth    = 12 // interface, with its queue and CPU; longer goes on a line of its own
	protocolWidth = 13 // vlan_overflow; a longer keyword is cut
	ruleWidth     = 20 // a longer rule name loses its middle
	pktsWidth     = 11 // PKTS/S: exact up to 999,999,999
	totalWidth    = 11 // TOTAL PKTS: exact up to 999,999,999
)

// The rows after the label column, with the widths above: class rows and,
// in their own section, rule rows, ending in the same number columns. Each
// row is exactly width columns (TestRenderFits).
const (
	classRow = "%-6.6s %-13s %-10.10s %11s %10s %11s"
	ruleRow  = "%-20s %-10.10s %11s %10s %11s"
)

// render draws one screen, at most width columns wide, and updates h to the
// current totals.
func render(snap xdp_drop.Snapshot, h *history, elapsed time.Duration, now time.Time, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xdp_drop watch  %s  every %v  (%s)\n", now.Format("2006-01-02 15:04:05"), interval, quitText(snap.Links))
	observed := false
	for _, l := range snap.Links {
		if l.Observer != "" {
			b.WriteString(clip(fmt.Sprintf("read-only %s: counters of %s, program id %d", l.Interface, l.Observer, l.ProgramID), width) + "\n")
			observed = true
		}
	}
	if observed {
		b.WriteString("Ctrl-C leaves what it observes attached, its counters running\n")
	}
	t := table{b: &b}
	t.row("INTERFACE", fmt.Sprintf(classRow, "FAMILY", "PROTOCOL", "ACTION", "PKTS/S", "BYTES/S", "TOTAL PKTS"))

	type line struct {
		key   xdp_drop.SeriesKey
		label string
		rates
		total uint64
	}
	lines := make([]line, 0, len(snap.Series))
	totals := map[string]rates{}
	seconds := elapsed.Seconds()
	rated := h.shown
	h.shown = true
	for _, s := range snap.Series {
		if s.Packets == 0 {
			continue // a standing series no frame reached yet
		}
		was, seen := h.series[s.SeriesKey]
		cur := sample{s.Packets, s.Bytes}
		r := since(was, seen, cur, seconds)
		h.series[s.SeriesKey] = cur
		lines = append(lines, line{s.SeriesKey, seriesLabel(s.SeriesKey), r, s.Packets})
		sum := totals[s.Action]
		totals[s.Action] = rates{sum.pps + r.pps, sum.bps + r.bps}
	}
	sort.Slice(lines, func(i, j int) bool {
		if lines[i].label != lines[j].label {
			return lines[i].label < lines[j].label
		}
		return lines[i].pps > lines[j].pps || lines[i].pps == lines[j].pps && lines[i].key.Protocol < lines[j].key.Protocol
	})
	for _, l := range lines {
		pps, bps := rateText(l.rates, rated)
		t.row(l.label, fmt.Sprintf(classRow, l.key.Family, clip(l.key.Protocol, protocolWidth), l.key.Action,
			pps, bps, number(l.total, totalWidth)))
	}
	for _, action := range xdp_drop.Actions {
		if r, ok := totals[action]; ok {
			pps, bps := rateText(r, rated)
			t.row("total", strings.TrimRight(fmt.Sprintf(classRow, "", "", action, pps, bps, ""), " "))
		}
	}
	renderRules(&t, snap.Rules, h, seconds, rated)
	renderBans(&t, snap.Bans, h, seconds, rated, now)
	renderFlowSpec(&t, snap, h, seconds, rated, now)
	renderTop(&t, snap.Top, seconds)
	for _, l := range snap.Links {
		b.WriteString(linkText(l) + "\n")
	}
	return b.String()
}

// renderRules adds the rule section: per interface, the rules in the order
// of the config, which is the order they are checked in, every rule also
// when it never matched.
func renderRules(t *table, rules []xdp_drop.RuleSeries, h *history, seconds float64, rated bool) {
	if len(rules) == 0 {
		return
	}
	// Snapshot lists each interface's rules in config order: a stable sort
	// keeps it.
	rules = slices.Clone(rules)
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].Interface < rules[j].Interface })
	t.row("INTERFACE", fmt.Sprintf(ruleRow, "RULE", "ACTION", "PKTS/S", "BYTES/S", "TOTAL PKTS"))
	for _, r := range rules {
		key := ruleKey{r.Interface, r.Rule, r.Action}
		was, seen := h.rules[key]
		cur := sample{r.Packets, r.Bytes}
		rt := since(was, seen, cur, seconds)
		h.rules[key] = cur
		pps, bps := rateText(rt, rated)
		t.row(r.Interface, fmt.Sprintf(ruleRow, clipMiddle(r.Rule, ruleWidth), r.Action,
			pps, bps, number(r.Packets, totalWidth)))
	}
}

// rateText formats the rate columns; without an earlier screen (rated
// false) there is no rate yet, only the totals.
func rateText(r rates, rated bool) (pps, bps string) {
	if !rated {
		return noRate, noRate
	}
	return perSecond(r.pps, pktsWidth), rate(r.bps)
}

// quitText says what Ctrl-C does: it detaches what the view attached, and
// only quits a view that observes another instance.
func quitText(links []xdp_drop.Link) string {
	for _, l := range links {
		if l.Observer == "" {
			return "Ctrl-C detaches and quits"
		}
	}
	if len(links) == 0 {
		return "Ctrl-C detaches and quits"
	}
	return "only observes; Ctrl-C quits"
}

// table writes rows after a label column. A label too long for the column
// (a long interface name with its queue and CPU) gets a line of its own,
// whole, and the rows it labels follow with the column blank.
type table struct {
	b     *strings.Builder
	above string // the long label on a line of its own above, if any
}

func (t *table) row(label, rest string) {
	if utf8.RuneCountInString(label) <= labelWidth {
		t.above = ""
		fmt.Fprintf(t.b, "%-12s %s\n", label, rest)
		return
	}
	if label != t.above {
		t.b.WriteString(clip(label, width) + "\n")
		t.above = label
	}
	fmt.Fprintf(t.b, "%-12s %s\n", "", rest)
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
	if l.Attached && l.Observer != "" {
		return clip(fmt.Sprintf("link %s: read-only, %s mode, program id %d (not attached here)", l.Interface, l.Mode, l.ProgramID), width)
	}
	if l.Attached {
		mode := l.Mode + " mode"
		if l.Fallback {
			mode += " (auto fell back)"
		}
		return clip(fmt.Sprintf("link %s: attached, %s, program id %d%s", l.Interface, mode, l.ProgramID, sampleText(l)), width)
	}
	return clip(fmt.Sprintf("link %s: NOT attached: %s", l.Interface, l.Error), width)
}

// clip shortens s to at most w columns, ending it with "..." when it cut.
func clip(s string, w int) string {
	r := []rune(s)
	if len(r) <= w {
		return s
	}
	return string(r[:w-3]) + "..."
}

// clipMiddle shortens s to at most w columns by putting "..." in place of
// its middle: names that differ at either end stay apart.
func clipMiddle(s string, w int) string {
	r := []rune(s)
	if len(r) <= w {
		return s
	}
	head := (w - 3 + 1) / 2
	tail := w - 3 - head
	return string(r[:head]) + "..." + string(r[len(r)-tail:])
}

// number formats n with thousands separators when that fits in w columns,
// else with three significant digits and an SI prefix (1.23G, 18.4E).
func number(n uint64, w int) string {
	if s := quote.Thousands(n); len(s) <= w {
		return s
	}
	return short(float64(n))
}

// perSecond formats a rate as number does its count, rounded to a whole.
func perSecond(v float64, w int) string {
	if v < 1e18 { // well inside a uint64
		return number(uint64(math.Round(v)), w)
	}
	return short(v)
}

// siPrefixes are the SI prefixes of the powers of 1000, from 1000^0.
var siPrefixes = []string{"", "k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q"}

// short formats v >= 1000 with three significant digits and an SI prefix,
// in at most 5 columns; past the prefixes, in 7 ("1.2e+33").
func short(v float64) string {
	if v < 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	e := strconv.FormatFloat(v, 'e', 2, 64) // "1.23e+09", rounded
	exp, err := strconv.Atoi(e[5:])
	if err != nil || exp/3 >= len(siPrefixes) {
		return strconv.FormatFloat(v, 'e', 1, 64)
	}
	digits, point := e[:1]+e[2:4], exp%3+1
	s := digits[:point]
	if point < len(digits) {
		s += "." + digits[point:]
	}
	return s + siPrefixes[exp/3]
}

// rate formats bytes per second with an SI prefix, one decimal, in at most
// 10 columns.
func rate(bps float64) string {
	m := bps
	for _, p := range siPrefixes {
		if s := strconv.FormatFloat(m, 'f', 1, 64); len(s) <= len("999.9") {
			return s + " " + p + "B/s"
		}
		m /= 1000
	}
	return strconv.FormatFloat(bps, 'e', 0, 64) + " B/s"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// errorLog is the accumulator the watch view hands the plugin: Start and
// Snapshot report only errors through it, which it logs. It emits no
// points, so the other methods are left to the nil interface.
type errorLog struct {
	telegraf.Accumulator
	log *levelWriter
	// unwatchable is the first error that says an interface can be neither
	// attached nor observed: another tool's program, an instance of
	// another config, or too few privileges to read it.
	unwatchable error
}

func (e *errorLog) AddError(err error) {
	var foreign *bpf.ExistingProgramError
	var mismatch *bpf.PolicyMismatchError
	if e.unwatchable == nil && (errors.As(err, &foreign) || errors.As(err, &mismatch) || errors.Is(err, bpf.ErrObserveNeedsSysAdmin)) {
		e.unwatchable = err
		return // returned by watch, which logs it
	}
	e.log.Errorf("%v", err)
}
