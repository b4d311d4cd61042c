package xdp_drop

import (
	"github.com/xdp-drop/xdp_drop/bpf"
)

// Plan is what the plugin would attach, read after Init without attaching
// anything: for a config check.
type Plan struct {
	// Interfaces are those named exactly and those the patterns match now,
	// in the configured namespace.
	Interfaces []PlannedInterface
	// Unmatched are the patterns of interfaces that match no interface now.
	Unmatched []string
	Rules     []PlannedRule
	Footprint bpf.Footprint
	// Pins says what pin_path would meet now (no BPF filesystem, say),
	// worded for the operator; nil when pin_path is unset or usable.
	Pins error
	// Bans is [bans] as read; nil without it.
	Bans *PlannedBans
	// FlowSpec is [flowspec] as read; nil without it.
	FlowSpec *PlannedFlowSpec
}

// PlannedInterface is an interface of the plan.
type PlannedInterface struct {
	Name    string
	Pattern string // the pattern that matched it; "" when named exactly
	Present bool   // it exists now
}

// PlannedRule is a rule of the plan, as compiled: its prefixes by direction
// and family (prefix files included, repeats merged), its port entries and
// prefix files.
type PlannedRule struct {
	Name, Action                  string
	SrcV4, SrcV6, DstV4, DstV6    int
	Protocols, SrcPorts, DstPorts int
	PrefixFiles                   int
	Rate, Burst                   uint64 // limit rules only
}

// Plan reads what the plugin would attach: the interfaces present now and
// the rules with the sizes of their maps. Call it after Init.
func (x *XDPDrop) Plan() (Plan, error) {
	var plan Plan
	for i := range x.links.policy.Rules {
		plan.Rules = append(plan.Rules, plannedRule(&x.links.policy.Rules[i], x.Rules[i].Action))
	}
	fp, err := bpf.FootprintOf(x.links.policy)
	if err != nil {
		return plan, err
	}
	plan.Footprint = fp
	plan.Pins = x.links.planPins()
	plan.Bans = x.planBans()
	plan.FlowSpec = x.planFlowSpec()
	plan.Interfaces, plan.Unmatched, err = x.links.planInterfaces()
	return plan, err
}

func plannedRule(r *bpf.Rule, action string) PlannedRule {
	out := PlannedRule{Name: r.Name, Action: action, Protocols: len(r.Protocols),
		SrcPorts: len(r.SrcPorts), DstPorts: len(r.DstPorts), PrefixFiles: len(r.PrefixFiles)}
	out.SrcV4, out.SrcV6 = familyCounts(r.SrcPrefixes)
	out.DstV4, out.DstV6 = familyCounts(r.DstPrefixes)
	if r.Limit != nil {
		out.Rate, out.Burst = r.Limit.Rate, r.Limit.Burst
	}
	return out
}
