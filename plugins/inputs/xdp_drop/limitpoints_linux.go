//go:build linux

package xdp_drop

import "github.com/xdp-drop/xdp_drop/bpf"

// appendLimitRule appends the two series of a limit rule: action=pass,
// the frames within budget, and action=drop (would_drop in a dry run),
// those over it, of the decided frames of which limited were over budget.
func appendLimitRule(series []RuleSeries, iface, rule string, dryRun bool, decided, limited bpf.Counter) []RuleSeries {
	// A read racing a frame on another CPU may see it counted as limited
	// and not yet as decided.
	limited.Packets, limited.Bytes = min(limited.Packets, decided.Packets), min(limited.Bytes, decided.Bytes)
	return append(series,
		RuleSeries{Interface: iface, Rule: rule, Action: ActionTag(dryRun, bpf.ActionPass),
			Packets: decided.Packets - limited.Packets, Bytes: decided.Bytes - limited.Bytes},
		RuleSeries{Interface: iface, Rule: rule, Action: ActionTag(dryRun, bpf.ActionDrop),
			Packets: limited.Packets, Bytes: limited.Bytes},
	)
}
