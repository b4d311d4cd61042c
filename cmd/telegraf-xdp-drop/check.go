package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// checkUsage is the -check flag's help.
const checkUsage = "check the config and every file it names (trust included: for the user running -check), report every error (stderr, with file:line), " +
	"print what would be attached (interfaces present now, rules and their sizes, kernel memory), attach nothing; exit 0 when valid, 1 otherwise. Run it before a Telegraf reload"

// check validates the config at path as a start would, and every file it
// names under the trust check for the running user, reporting every error
// on log; then prints to out what a start would attach now. It attaches
// nothing, pins nothing and makes no handover directory. It returns the
// exit code: 0 valid, 1 any error.
func check(path string, out io.Writer, log *levelWriter, probeLAPI bool) int {
	uid := os.Getuid()
	failed := false
	plugin, conf, err := readConfig(path, uid)
	var untrusted *untrustedError
	if errors.As(err, &untrusted) {
		log.Errorf("config %s: %v", path, err)
		failed = true
		// Its other errors are worth knowing too.
		plugin, conf, err = readConfig(path, noTrustCheck)
	}
	if plugin == nil {
		log.Errorf("%v", err)
		return 1
	}
	plugin.Log = log
	plugin.TrustPrefixFiles(uid)
	// Unknown keys and refused values, reported together in line order.
	if err := errors.Join(err, plugin.Init()); err != nil {
		conf.report(log, err)
		return 1
	}
	if failed {
		return 1
	}
	plan, err := plugin.Plan()
	if err != nil {
		log.Errorf("config %s: %v", path, err)
		return 1
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		log.Errorf("count the CPUs: %v", err)
		return 1
	}
	warnPlan(log, conf, plugin, plan)
	printPlan(out, path, plugin, plan, cpus)
	printFlowSpec(out, conf, plan.FlowSpec)
	if probeLAPI && !checkLAPI(plugin, out) {
		return 1
	}
	return 0
}

// warnPlan warns of what is valid but attaches nothing now: no interface
// listed, an interface named that is not there, a pattern matching none.
func warnPlan(log *levelWriter, conf *loadedConfig, plugin *xdp_drop.XDPDrop, plan xdp_drop.Plan) {
	at := conf.lines.line(0, "interfaces")
	where := fmt.Sprintf("config %s:%d", conf.path, at)
	if at == 0 {
		where = "config " + conf.path
	}
	if len(plugin.Interfaces) == 0 {
		log.Warnf(`%s: interfaces = []: nothing would be attached; list the interfaces to attach to, e.g. interfaces = ["eth1"]`, where)
	}
	for _, ifc := range plan.Interfaces {
		if !ifc.Present {
			log.Warnf("%s: interfaces: %s is not present now%s; it is attached once it appears", where, quote.Value(ifc.Name), inNamespace(plugin))
		}
	}
	for _, p := range plan.Unmatched {
		log.Warnf("%s: interfaces: the pattern %s matches no interface now%s; interfaces it matches later are attached at the gather after they appear", where, quote.Value(p), inNamespace(plugin))
	}
	if plan.Pins != nil {
		// What the host offers now, not the config's fault: a warning.
		where := "config " + conf.path
		if at := conf.lines.line(0, "pin_path"); at != 0 {
			where = fmt.Sprintf("config %s:%d", conf.path, at)
		}
		log.Warnf("%s: %v", where, plan.Pins)
	}
}

func inNamespace(plugin *xdp_drop.XDPDrop) string {
	if plugin.Namespace == "" {
		return ""
	}
	return " in namespace " + quote.Value(plugin.Namespace)
}

// printPlan writes what a start would attach.
func printPlan(out io.Writer, path string, plugin *xdp_drop.XDPDrop, plan xdp_drop.Plan, cpus int) {
	w := &planWriter{out: out}
	w.line("config %s: valid; nothing attached (-check)", path)
	ns := "this process's network namespace"
	if plugin.Namespace != "" {
		ns = "namespace " + quote.Value(plugin.Namespace)
	}
	mode := plugin.Mode
	if mode == "" {
		mode = "native"
	}
	present := 0
	for _, ifc := range plan.Interfaces {
		if ifc.Present {
			present++
		}
	}
	w.line("interfaces in %s: %d would be attached now, in %s mode", ns, present, mode)
	for _, ifc := range plan.Interfaces {
		how := "named"
		if ifc.Pattern != "" {
			how = "matched by " + quote.Value(ifc.Pattern)
		}
		if !ifc.Present {
			how += ", not present now"
		}
		w.line("  %-15s %s", quote.Line(ifc.Name), how)
	}
	policy := "pass"
	if len(plugin.Drop) > 0 {
		policy = fmt.Sprintf("drop %v", plugin.Drop)
	}
	if plugin.DryRun {
		policy += " (dry_run: would_drop, nothing dropped)"
	}
	w.line("policy: frames no rule matches: %s", policy)
	if len(plan.Rules) > 0 {
		w.line("rules: %d, first match wins", len(plan.Rules))
	}
	for i, r := range plan.Rules {
		w.line("  %d %-20s %-5s %s", i+1, r.Name, r.Action, ruleSizes(r))
	}
	fp := plan.Footprint
	if len(plan.Rules) > 0 {
		w.line("rule maps (once, shared by every interface): %s prefixes (%s IPv4, %s IPv6): %s buckets, %s exact-prefix slots, trie entries %s IPv4 and %s IPv6, %s port masks, %s limiter cells",
			quote.Thousands(uint64(fp.PrefixesV4+fp.PrefixesV6)), quote.Thousands(uint64(fp.PrefixesV4)), quote.Thousands(uint64(fp.PrefixesV6)), quote.Thousands(uint64(fp.PrefixBuckets)), quote.Thousands(uint64(fp.ExactSlots)),
			quote.Thousands(uint64(fp.TrieV4)), quote.Thousands(uint64(fp.TrieV6)), quote.Thousands(uint64(fp.PortMasks)), quote.Thousands(uint64(fp.LimitCells)))
	}
	perIface := uint64(cpus)*fp.PerCPU + fp.Ring
	ring := ""
	if fp.Ring > 0 {
		ring = fmt.Sprintf(" and a sample ring of %s", bytesText(fp.Ring))
	}
	maps := "no rule maps"
	if len(plan.Rules) > 0 {
		maps = "rule maps " + bytesText(fp.RuleMaps)
	}
	var banMaps uint64
	if b := plan.Bans; b != nil {
		printBans(w, b)
		banMaps = b.MapMemory
		maps += ", ban maps " + bytesText(banMaps)
	}
	if fp.FlowSpecMaps > 0 {
		maps += ", FlowSpec maps " + bytesText(fp.FlowSpecMaps)
	}
	w.line("kernel memory, at most: %s; each interface %s (counters, %s per CPU on %s%s); %s for the %s present now",
		maps, bytesText(perIface), bytesText(fp.PerCPU), plural(cpus, "CPU"), ring, bytesText(fp.RuleMaps+banMaps+fp.FlowSpecMaps+uint64(present)*perIface), plural(present, "interface"))
}

// printFlowSpec writes [flowspec]: the speaker and each peer, on the
// lines of the config that set them. No session is started.
func printFlowSpec(out io.Writer, conf *loadedConfig, f *xdp_drop.PlannedFlowSpec) {
	if f == nil {
		return
	}
	w := &planWriter{out: out}
	at := func(key string) string {
		if line := conf.lines.line(0, key); line > 0 {
			return fmt.Sprintf(" (line %d)", line)
		}
		return ""
	}
	w.line("flowspec%s: BGP speaker AS %d, router_id %s; at most %s rules per family, only_local_destinations %t; no session started (-check)",
		at("flowspec"), f.LocalAS, f.RouterID, quote.Thousands(uint64(f.MaxRules)), f.OnlyLocalDestinations)
	for _, p := range f.Peers {
		how := "connects out (listens on no port)"
		if p.Passive {
			how = fmt.Sprintf("passive: waits for it to connect to port %d", p.Port)
		}
		md5 := "no TCP MD5"
		if p.KeyFrom != "" {
			md5 = "TCP MD5 key from " + quote.Value(p.KeyFrom)
		}
		w.line("  peer %d%s: %s port %d, AS %d, %s, %s", p.N, at(fmt.Sprintf("flowspec.peer[%d]", p.N)), p.Address, p.Port, p.PeerAS, how, md5)
	}
}

// printBans writes [bans]: the feed, the allow list, detection.
func printBans(w *planWriter, b *xdp_drop.PlannedBans) {
	dry := ""
	if b.DryRun {
		dry = " (dry_run: would_drop, nothing dropped)"
	}
	w.line("bans: at most %s in force per family%s, checked before the rules", quote.Thousands(uint64(b.Max)), dry)
	if b.URL != "" {
		w.line("  feed crowdsec: %s, key from %s (not contacted; -check-lapi asks it once)", quote.Value(b.URL), quote.Value(b.KeyFrom))
	}
	w.line("  allow list: %s IPv4, %s IPv6 prefixes, %s", quote.Thousands(uint64(b.AllowV4)), quote.Thousands(uint64(b.AllowV6)), plural(b.AllowFiles, "file"))
	if d := b.Detect; d != nil {
		rate := fmt.Sprintf("pps %s", quote.Thousands(uint64(d.PPS)))
		if d.BytesPerSecond > 0 {
			rate += fmt.Sprintf(", bytes_per_second %s", quote.Thousands(uint64(d.BytesPerSecond)))
		}
		mode, push := "bans", fmt.Sprint(d.CrowdSecPush)
		if b.DetectDryRun {
			mode = "dry run (" + b.DetectDryRunWhy + "): logs and counts, bans nothing"
			if d.CrowdSecPush {
				push += " (a dry run pushes nothing)"
			}
		}
		w.line("  detect: %s for %s, ban %s (up to %s), %s; crowdsec_push %s", rate, b.DetectFor, b.DetectDuration, b.DetectMaxDuration, mode, push)
		w.line("  detect evidence: verified bans drop; unverified_action %s, push_unverified %t; at most %d bans and %d pushes a minute",
			b.DetectUnverified, b.DetectPushUnverified, b.DetectMaxBans, b.DetectMaxPushes)
	}
}

// ruleSizes says what a rule holds once compiled.
func ruleSizes(r xdp_drop.PlannedRule) string {
	var parts []string
	if r.Protocols > 0 {
		parts = append(parts, plural(r.Protocols, "protocol"))
	}
	for _, d := range []struct {
		dir    string
		v4, v6 int
	}{{"src", r.SrcV4, r.SrcV6}, {"dst", r.DstV4, r.DstV6}} {
		if d.v4+d.v6 > 0 {
			parts = append(parts, fmt.Sprintf("%s prefixes %s IPv4 + %s IPv6", d.dir, quote.Thousands(uint64(d.v4)), quote.Thousands(uint64(d.v6))))
		}
	}
	if r.PrefixFiles > 0 {
		parts = append(parts, plural(r.PrefixFiles, "prefix file"))
	}
	if r.SrcPorts > 0 {
		parts = append(parts, plural(r.SrcPorts, "src_port entry"))
	}
	if r.DstPorts > 0 {
		parts = append(parts, plural(r.DstPorts, "dst_port entry"))
	}
	if r.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %s/s burst %s", quote.Thousands(uint64(r.Rate)), quote.Thousands(uint64(r.Burst))))
	}
	return strings.Join(parts, ", ")
}

// plural writes n things, "entry" becoming "entries".
func plural(n int, thing string) string {
	switch {
	case n == 1:
		return "1 " + thing
	case strings.HasSuffix(thing, "y"):
		return fmt.Sprintf("%s %sies", quote.Thousands(uint64(n)), strings.TrimSuffix(thing, "y"))
	}
	return fmt.Sprintf("%s %ss", quote.Thousands(uint64(n)), thing)
}

type planWriter struct{ out io.Writer }

func (w *planWriter) line(format string, args ...any) {
	fmt.Fprintf(w.out, format+"\n", args...)
}

// bytesText writes a size in MB, or in KB below 1 MB, as the README does.
func bytesText(n uint64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
