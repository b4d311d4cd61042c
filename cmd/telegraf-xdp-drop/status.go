package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// prefixesFrom says where -status counts a rule's prefixes: the kernel
// holds the rules' prefixes merged into shared maps, which cannot say which
// file listed which, so they are counted from the config and the files as
// this run reads them.
const prefixesFrom = "config and files, as read now"

// statusReport is what -status prints, and its -json shape: a documented
// contract (README, "Status of what is in force"); fields are only added.
type statusReport struct {
	Config       string            `json:"config"`
	Drop         []string          `json:"drop"`
	DryRun       bool              `json:"dry_run"`
	Interfaces   []interfaceStatus `json:"interfaces"`
	Rules        []ruleStatus      `json:"rules"`
	PrefixesFrom string            `json:"prefixes_from"`
	// Bans, with [bans]: per interface and origin, the bans in force read
	// from the instance's ban maps and the frames they decided.
	Bans []banStatus `json:"bans,omitempty"`
	// FlowSpec, with [flowspec]: the rules in force and the peers when the
	// view can read them; else where they are shown.
	FlowSpec *flowSpecStatus `json:"flowspec,omitempty"`
}

type flowSpecStatus struct {
	Rules []flowRuleStatus `json:"rules"`
	Peers []string         `json:"peers"`
	// Note says where the rules and peers come from beside a running
	// instance: its maps, read-only (-status starts no BGP session), and
	// how old the peers' states it wrote are.
	Note string `json:"note,omitempty"`
}

type flowRuleStatus struct {
	Interface      string `json:"interface"`
	Rule           string `json:"rule"`
	Action         string `json:"action"`
	Text           string `json:"rule_text"`
	Packets        uint64 `json:"packets"`
	Bytes          uint64 `json:"bytes"`
	DroppedPackets uint64 `json:"dropped_packets"`
	DroppedBytes   uint64 `json:"dropped_bytes"`
}

type banStatus struct {
	Interface string `json:"interface"`
	Origin    string `json:"origin"`
	Action    string `json:"action"`
	InForce   int64  `json:"in_force"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	Error     string `json:"error,omitempty"`
}

type interfaceStatus struct {
	Interface string `json:"interface"`
	Attached  bool   `json:"attached"`
	ProgramID int64  `json:"program_id"` // 0 when not attached
	Mode      string `json:"mode"`       // as attached; configured when not
	// Route is how the program is attached: "link" (a BPF link that
	// Holders hold), "pinned link" (a BPF link no process holds: kept by
	// keep_attached's pin), "netlink" (no link), "" when not attached.
	Route   string         `json:"route"`
	LinkID  uint32         `json:"link_id"`
	Holders []holderStatus `json:"holders"`
	Error   string         `json:"error,omitempty"` // why it is not attached or not readable
}

type holderStatus struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
}

type ruleStatus struct {
	Name      string   `json:"name"`
	Action    string   `json:"action"`
	Protocols []string `json:"protocols"`
	SrcPorts  []string `json:"src_ports"`
	DstPorts  []string `json:"dst_ports"`
	// SrcPrefixes and DstPrefixes are those in force by family, every
	// source of the direction merged.
	SrcPrefixes familyCount    `json:"src_prefixes"`
	DstPrefixes familyCount    `json:"dst_prefixes"`
	Sources     []sourceStatus `json:"prefix_sources"`
	Limit       *limitStatus   `json:"limit,omitempty"`
	// Hits are the frames the rule decided, per interface and action,
	// read from the running instance's program.
	Hits []hitStatus `json:"hits"`
}

type familyCount struct {
	IPv4 int `json:"ipv4"`
	IPv6 int `json:"ipv6"`
}

type sourceStatus struct {
	Option string `json:"option"`
	File   string `json:"file,omitempty"`
	familyCount
	State string `json:"state"` // "config", "loaded" or "error"
	Error string `json:"error,omitempty"`
}

type limitStatus struct {
	Rate       uint64 `json:"rate"`
	Burst      uint64 `json:"burst"`
	Per        string `json:"per"`
	PrefixIPv4 uint8  `json:"prefix_ipv4,omitempty"`
	PrefixIPv6 uint8  `json:"prefix_ipv6,omitempty"`
}

type hitStatus struct {
	Interface string `json:"interface"`
	Action    string `json:"action"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
}

// runStatus prints, once, what the running instance of the config has in
// force: per interface its program, mode and route, per rule what it
// matches and its hits, and the prefix files' state. It attaches, detaches
// and resets nothing. It returns 0 when every interface is held by an
// instance whose counters it read, 1 otherwise (after printing).
func runStatus(plugin *xdp_drop.XDPDrop, configFile string, asJSON bool, out io.Writer, log *levelWriter) int {
	plugin.Log = log
	plugin.HandoverTimeout = 0
	plugin.Run.Observe, plugin.Run.ReadOnly = true, true
	if err := plugin.Init(); err != nil {
		log.Errorf("config %s: %v", configFile, err)
		return 1
	}
	errs := &statusErrors{log: log}
	if err := plugin.Start(errs); err != nil {
		log.Errorf("%v", err)
		return 1
	}
	plugin.Reconcile(errs)
	snap := plugin.Snapshot(errs)
	rules := plugin.RulesInForce()
	plugin.Stop()

	report := newStatusReport(configFile, plugin, snap, rules)
	var err error
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(report)
	} else {
		_, err = io.WriteString(out, renderStatus(report))
	}
	if err != nil {
		log.Errorf("write the status: %v", err)
		return 1
	}
	for _, ifc := range report.Interfaces {
		if !ifc.Attached {
			return 1
		}
	}
	return 0
}

// statusErrors is the accumulator -status hands the plugin: it logs the
// errors, which the report carries too (per interface, per file).
type statusErrors struct {
	telegraf.Accumulator
	log *levelWriter
}

func (e *statusErrors) AddError(err error) { e.log.Errorf("%v", err) }

// newStatusReport puts the snapshot's links and rule counters beside the
// rules in force.
func newStatusReport(configFile string, plugin *xdp_drop.XDPDrop, snap xdp_drop.Snapshot, rules []xdp_drop.RuleInForce) statusReport {
	r := statusReport{Config: configFile, DryRun: plugin.DryRun, PrefixesFrom: prefixesFrom,
		Drop: []string{}, Interfaces: []interfaceStatus{}, Rules: []ruleStatus{}}
	for _, d := range plugin.Drop {
		r.Drop = append(r.Drop, fmt.Sprint(d))
	}
	for _, l := range snap.Links {
		r.Interfaces = append(r.Interfaces, newInterfaceStatus(l))
	}
	for _, in := range rules {
		rs := ruleStatus{
			Name: in.Name, Action: in.Action,
			Protocols: orEmpty(in.Protocols), SrcPorts: orEmpty(in.SrcPorts), DstPorts: orEmpty(in.DstPorts),
			SrcPrefixes: familyCount{in.Src.IPv4, in.Src.IPv6}, DstPrefixes: familyCount{in.Dst.IPv4, in.Dst.IPv6},
			Sources: []sourceStatus{}, Hits: []hitStatus{},
		}
		for _, s := range in.Sources {
			st := sourceStatus{Option: s.Option, File: s.File, familyCount: familyCount{s.IPv4, s.IPv6}, State: "config"}
			switch {
			case s.Error != "":
				st.State, st.Error = "error", s.Error
			case s.File != "":
				st.State = "loaded"
			}
			rs.Sources = append(rs.Sources, st)
		}
		if l := in.Limit; l != nil {
			rs.Limit = &limitStatus{Rate: l.Rate, Burst: l.Burst, Per: "source", PrefixIPv4: l.PrefixV4, PrefixIPv6: l.PrefixV6}
			if l.PerRule {
				rs.Limit.Per, rs.Limit.PrefixIPv4, rs.Limit.PrefixIPv6 = "rule", 0, 0
			}
		}
		for _, s := range snap.Rules {
			if s.Rule == in.Name {
				rs.Hits = append(rs.Hits, hitStatus{Interface: s.Interface, Action: s.Action, Packets: s.Packets, Bytes: s.Bytes})
			}
		}
		r.Rules = append(r.Rules, rs)
	}
	if plugin.FlowSpec != nil {
		r.FlowSpec = newFlowSpecStatus(snap)
	}
	for _, s := range snap.Bans {
		r.Bans = append(r.Bans, banStatus{Interface: s.Interface, Origin: s.Origin, Action: s.Action,
			InForce: s.Active, Packets: s.Packets, Bytes: s.Bytes, Error: s.Error})
	}
	return r
}

func newInterfaceStatus(l xdp_drop.Link) interfaceStatus {
	s := interfaceStatus{Interface: l.Interface, Attached: l.Attached, Mode: l.Mode, Holders: []holderStatus{}, Error: l.Error}
	if !l.Attached {
		return s
	}
	s.ProgramID, s.LinkID = l.ProgramID, l.LinkID
	for _, h := range l.Holders {
		s.Holders = append(s.Holders, holderStatus{PID: h.PID, Comm: h.Comm})
	}
	switch {
	case l.LinkID == 0:
		s.Route = "netlink"
	case len(l.Holders) == 0:
		s.Route = "pinned link"
	default:
		s.Route = "link"
	}
	return s
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// renderStatus is the human form of the report: a table per part, in the
// manner of xdp-filter status.
func renderStatus(r statusReport) string {
	var b strings.Builder
	drop := strings.Join(r.Drop, " ")
	if drop == "" {
		drop = "no protocol"
	}
	fmt.Fprintf(&b, "xdp_drop status of %s\ndrop %s, dry_run %v\n\n", r.Config, drop, r.DryRun)

	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "INTERFACE\tPROGRAM\tMODE\tATTACHED BY")
	for _, i := range r.Interfaces {
		if !i.Attached {
			fmt.Fprintf(w, "%s\t-\t-\tnot attached: %s\n", i.Interface, i.Error)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", i.Interface, i.ProgramID, i.Mode, routeText(i))
	}
	w.Flush()
	renderBanStatus(&b, r.Bans)
	renderFlowSpecStatus(&b, r.FlowSpec)
	if len(r.Rules) == 0 {
		b.WriteString("\nno rules: the drop list decides every frame\n")
		return trimLines(b.String())
	}

	b.WriteString("\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tACTION\tINTERFACE\tVERDICT\tPACKETS\tBYTES\tMATCHES")
	for _, rule := range r.Rules {
		match := matchText(rule)
		if len(rule.Hits) == 0 {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t-\t%s\n", rule.Name, rule.Action, match)
		}
		for i, h := range rule.Hits {
			name, action := rule.Name, rule.Action
			if i > 0 {
				name, action, match = "", "", ""
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, action, h.Interface, h.Action,
				number(h.Packets, 26), number(h.Bytes, 26), match)
		}
	}
	w.Flush()

	var sources [][]string
	for _, rule := range r.Rules {
		for _, s := range rule.Sources {
			where := s.File
			if where == "" {
				where = "(config)"
			}
			state := s.State
			if s.Error != "" {
				state += ": " + s.Error
			}
			sources = append(sources, []string{rule.Name, s.Option, strconv.Itoa(s.IPv4), strconv.Itoa(s.IPv6), where, state})
		}
	}
	if len(sources) == 0 {
		return trimLines(b.String())
	}
	b.WriteString("\nprefixes counted from the config and the files as read now (the kernel holds them merged)\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tOPTION\tIPV4\tIPV6\tFROM\tSTATE")
	for _, s := range sources {
		fmt.Fprintln(w, strings.Join(s, "\t"))
	}
	w.Flush()
	return trimLines(b.String())
}

// hasSource reports whether a rule has prefixes of option's direction
// from any source (the option itself or its files), which may list none.
func hasSource(r ruleStatus, option string) bool {
	for _, s := range r.Sources {
		if strings.HasPrefix(s.Option, option) {
			return true
		}
	}
	return false
}

// trimLines drops the spaces tabwriter leaves after a row's last cell.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// routeText says how an interface's program is attached and who holds it.
func routeText(i interfaceStatus) string {
	switch i.Route {
	case "netlink":
		return "netlink (no BPF link: detached only by another netlink call)"
	case "pinned link":
		return fmt.Sprintf("link %d, held by no process: kept by a pin (keep_attached)", i.LinkID)
	}
	holders := make([]string, len(i.Holders))
	for n, h := range i.Holders {
		holders[n] = fmt.Sprintf("pid %d (%s)", h.PID, h.Comm)
	}
	return fmt.Sprintf("link %d, held by %s", i.LinkID, strings.Join(holders, ", "))
}

// matchText is what a rule matches, as the config words it.
func matchText(r ruleStatus) string {
	var parts []string
	if len(r.Protocols) > 0 {
		parts = append(parts, "protocol "+strings.Join(r.Protocols, ","))
	}
	if len(r.SrcPorts) > 0 {
		parts = append(parts, "src_port "+strings.Join(r.SrcPorts, ","))
	}
	if len(r.DstPorts) > 0 {
		parts = append(parts, "dst_port "+strings.Join(r.DstPorts, ","))
	}
	for _, d := range []struct {
		option string
		count  familyCount
	}{{"src_prefix", r.SrcPrefixes}, {"dst_prefix", r.DstPrefixes}} {
		if d.count.IPv4+d.count.IPv6 > 0 || hasSource(r, d.option) {
			parts = append(parts, fmt.Sprintf("%s %d IPv4, %d IPv6", d.option, d.count.IPv4, d.count.IPv6))
		}
	}
	if l := r.Limit; l != nil {
		per := "per rule"
		if l.Per == "source" {
			per = fmt.Sprintf("per source /%d, /%d", l.PrefixIPv4, l.PrefixIPv6)
		}
		parts = append(parts, fmt.Sprintf("rate %d/s burst %d %s", l.Rate, l.Burst, per))
	}
	return strings.Join(parts, "; ")
}

// checkViews refuses flags that do not go together: -json without
// -status, and -status with -watch.
func checkViews(status, watch, asJSON bool) error {
	switch {
	case status && watch:
		return errors.New("-status prints once and -watch every second: give one of them")
	case asJSON && !status:
		return errors.New("-json prints -status as JSON: add -status, or leave -json out")
	}
	return nil
}

// renderBanStatus writes the bans table: per interface and origin, the
// bans in force (read from the kernel) and the frames they decided.
func renderBanStatus(b *strings.Builder, bans []banStatus) {
	if len(bans) == 0 {
		return
	}
	b.WriteString("\n")
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "BANS\tINTERFACE\tACTION\tIN FORCE\tPACKETS\tBYTES")
	for _, s := range bans {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Origin, s.Interface, s.Action,
			number(uint64(max(s.InForce, 0)), 26), number(s.Packets, 26), number(s.Bytes, 26))
	}
	w.Flush()
	for _, s := range bans {
		if s.Error != "" {
			fmt.Fprintf(b, "bans %s on %s: %s\n", s.Origin, s.Interface, s.Error)
		}
	}
}

// newFlowSpecStatus is the FlowSpec part of the report.
func newFlowSpecStatus(snap xdp_drop.Snapshot) *flowSpecStatus {
	f := &flowSpecStatus{Rules: []flowRuleStatus{}, Peers: []string{}}
	if snap.FlowViewed {
		f.Note = flowSpecViewed(snap, snap.Time)
	}
	for _, s := range snap.FlowSpec {
		f.Rules = append(f.Rules, flowRuleStatus{Interface: s.Interface, Rule: s.Rule, Action: s.Action, Text: s.Text,
			Packets: s.Packets, Bytes: s.Bytes, DroppedPackets: s.DroppedPackets, DroppedBytes: s.DroppedBytes})
	}
	for _, p := range snap.FlowPeers {
		f.Peers = append(f.Peers, peerText(p))
	}
	return f
}

// renderFlowSpecStatus writes the FlowSpec rules in force and the peers,
// or where they are shown.
func renderFlowSpecStatus(b *strings.Builder, f *flowSpecStatus) {
	if f == nil {
		return
	}
	b.WriteString("\n")
	if f.Note != "" {
		b.WriteString(f.Note + "\n")
	}
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FLOWSPEC RULE\tINTERFACE\tACTION\tPACKETS\tDROPPED\tTEXT")
	for _, r := range f.Rules {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Rule, r.Interface, r.Action, number(r.Packets, 26), number(r.DroppedPackets, 26), r.Text)
	}
	w.Flush()
	for _, p := range f.Peers {
		b.WriteString(p + "\n")
	}
}
