// Package bpf loads the xdp_drop XDP program, attaches it to network
// interfaces with bpf_link and reads their per-class counters. An Instance
// holds one policy and the rule maps its programs share; Instance.Acquire
// gets an interface its program, whatever the route. It knows nothing of
// Telegraf.
package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Mode is the XDP attach mode.
type Mode string

const (
	ModeNative  Mode = "native"
	ModeGeneric Mode = "generic"
	ModeOffload Mode = "offload"
	// ModeAuto tries native first and falls back to generic.
	ModeAuto Mode = "auto"
)

// Policy says what the XDP program drops.
type Policy struct {
	// DropAll drops every frame, IP or not, whole or truncated.
	DropAll bool
	// Protocols lists the IP protocols dropped, in IPv4 and IPv6 alike.
	// Every other frame passes.
	Protocols []uint8
	// Rules decide the IP frames they match, checked in order, before the
	// above; frames that match none are decided by DropAll and Protocols.
	Rules []Rule
	// DryRun passes every frame; the counters still tell what would have
	// been dropped.
	DryRun bool
	// PerQueue counts each RX queue apart (QueueSlots blocks, the last
	// shared by higher queues) instead of one block for all.
	PerQueue bool
	// Sample sends some frames up to user space (SampleReader).
	Sample Sampling
	// Bans drops sources banned for a time (Instance.Bans), before the
	// rules and the protocol policy.
	Bans BansConfig
	// FlowSpec enforces FlowSpec rules (Instance.FlowSpec) after the bans,
	// before the rules; it turns bans on (with a Max of 1024) when they are
	// off, since its code is in the programs with bans.
	FlowSpec FlowSpecConfig
}

// FlowSpecConfig turns the FlowSpec engine on.
type FlowSpecConfig struct {
	On bool
	// MaxRules is the most rules a family holds, 1 to FlowMaxRules; 0 is FlowMaxRules.
	MaxRules int
	// Exempt are the BGP sessions FlowSpec arrives on, at most
	// FlowExemptMax: a TCP frame from the address whose source or
	// destination port is the port never sees the FlowSpec rules (the
	// bans and the config's rules still apply), so that no rule cuts the
	// session that carries it.
	Exempt []netip.AddrPort
}

// FlowExemptMax is the most sessions FlowSpecConfig.Exempt holds.
const FlowExemptMax = 16

// flowBansMax is the bans' Max of an instance that has FlowSpec without
// bans: the ban maps carry the FlowSpec code, and this few bans cost little.
const flowBansMax = 1024

// withFlowSpec is policy with the bans FlowSpec needs turned on.
func withFlowSpec(policy Policy) Policy {
	if policy.FlowSpec.On && !policy.Bans.On {
		policy.Bans = BansConfig{On: true, Max: flowBansMax}
	}
	return policy
}

// QueueSlots is the number of per-queue counter blocks with PerQueue: 64
// queues and one overflow block for queues 64 and above.
const QueueSlots = 65

func (p Policy) queueSlots() uint32 {
	if p.PerQueue {
		return QueueSlots
	}
	return 1
}

// Drops reports whether the policy selects frames of class c for dropping
// (in a dry run: whether it would).
func (p Policy) Drops(c Class) bool {
	if p.DropAll {
		return true
	}
	proto, ok := c.Protocol()
	if !ok {
		return false
	}
	for _, d := range p.Protocols {
		if d == proto {
			return true
		}
	}
	return false
}

// Action is what the program does with a frame: in a dry run, what it
// would have done (it passes every frame).
type Action uint8

const (
	ActionPass = Action(xdpDropActionACTION_PASS)
	ActionDrop = Action(xdpDropActionACTION_DROP)
)

// ActionCount is the number of actions.
const ActionCount = int(xdpDropActionACTION_COUNT)

// verdicts is the per-class verdict table the program is loaded with, for
// frames no rule decides: the action counted, and whether to drop.
func (p Policy) verdicts() [ClassCount]uint8 {
	var v [ClassCount]uint8
	for c := range v {
		if p.Drops(Class(c)) {
			v[c] = uint8(ActionDrop)
			if !p.DryRun {
				v[c] |= uint8(xdpDropVerdictVERDICT_DROP)
			}
		}
	}
	return v
}

// ruleDebruijn is RULE_DEBRUIJN of the program.
const ruleDebruijn = 0x022FDD63CC95386D

// ruleDecisions is the program's rule_decisions: the decision of rule i,
// its verdict (as in verdicts) | (i + 1) << 8, at the de Bruijn index of
// bit i.
func (p Policy) ruleDecisions() [MaxRules]uint32 {
	var d [MaxRules]uint32
	for i, r := range p.Rules {
		v := uint32(0)
		if r.Limit != nil {
			// Pass within budget; the program decides the rest.
			v = uint32(xdpDropVerdictVERDICT_LIMIT)
		}
		if r.Drop {
			v = uint32(ActionDrop)
			if !p.DryRun {
				v |= uint32(xdpDropVerdictVERDICT_DROP)
			}
		}
		d[(uint64(1)<<i*ruleDebruijn)>>58] = v | uint32(i+1)<<8
	}
	return d
}

// fingerprint names the program build and policy whose counters a pin
// holds: counters pinned under another policy or program must not be mixed
// with new ones, since the action of a class depends on both.
func (p Policy) fingerprint() string {
	h := sha256.New()
	h.Write(_XdpDropBytes)
	// What the policy selects, not the verdicts: a dry run passes all, yet
	// its would_drop counts depend on the drop list.
	var selected [ClassCount]byte
	for c := range selected {
		if p.Drops(Class(c)) {
			selected[c] = 1
		}
	}
	h.Write(selected[:])
	if p.DryRun {
		h.Write([]byte("dry_run"))
	}
	// Rule counters are by position, and the rules decide the actions.
	for _, r := range p.Rules {
		if r.Limit != nil {
			fmt.Fprintf(h, "limit %+v\n", *r.Limit)
		}
		h.Write([]byte(r.fingerprintLine()))
	}
	if p.PerQueue {
		h.Write([]byte("per_queue"))
	}
	// Whether it samples, not how: a handed-over program is continued only
	// with the same code (see Takeover).
	if p.Sample.On() {
		h.Write([]byte("sample"))
	}
	// Bans add code and move dropped frames' counts; their dry run decides
	// whether a banned frame is counted a drop.
	if p.Bans.On {
		fmt.Fprintf(h, "bans %v\n", p.Bans.DryRun)
	}
	// FlowSpec adds code, and its drops are counted under their classes.
	if p.FlowSpec.On {
		fmt.Fprintf(h, "flowspec %d\n", p.FlowSpec.MaxRules)
		// The sessions exempt are constants of the code.
		if len(p.FlowSpec.Exempt) > 0 {
			fmt.Fprintf(h, "flowspec exempt %v\n", p.FlowSpec.Exempt)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// fingerprintLine is a rule as the fingerprint reads it. Names and paths
// are quoted whole with strconv.Quote, never clipped as a message clips
// them, and byte for byte as before: counters pinned by an earlier version
// continue only under the same fingerprint.
func (r Rule) fingerprintLine() string {
	if len(r.PrefixFiles) > 0 {
		files := make([]string, len(r.PrefixFiles))
		for i, f := range r.PrefixFiles {
			files[i] = strconv.Quote(f)
		}
		return fmt.Sprintf("rule %s %v %v files [%s] %v %v\n", strconv.Quote(r.Name), r.Drop, r.Protocols, strings.Join(files, " "), r.SrcPorts, r.DstPorts)
	}
	return fmt.Sprintf("rule %s %v %v %v %v %v %v\n", strconv.Quote(r.Name), r.Drop, r.Protocols, r.SrcPrefixes, r.DstPrefixes, r.SrcPorts, r.DstPorts)
}
