package flowspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// componentNames are the canonical text's names of component types 1..13,
// as the gobgp CLI spells them.
var componentNames = [...]string{"", "destination", "source", "protocol", "port", "destination-port",
	"source-port", "icmp-type", "icmp-code", "tcp-flags", "packet-length", "dscp", "fragment", "label"}

// canonicalText is the rule's text, deterministic and gobgp-CLI-like:
// its components in type order, then its actions; extra names the actions
// the host cannot honour. IPv6 rules start with "ipv6 " so that rules of
// the two families never share a text (nor an ID).
func canonicalText(r *bpf.FlowRule, extra []string) string {
	var b strings.Builder
	if r.IPv6 {
		b.WriteString("ipv6 ")
	}
	for t := 1; t <= 13; t++ {
		var s string
		switch t {
		case 1:
			s = prefixText(r.Dst)
		case 2:
			s = prefixText(r.Src)
		default:
			s = termsText(componentOf(r, t), t)
		}
		if s != "" {
			b.WriteString(componentNames[t])
			b.WriteByte(' ')
			b.WriteString(s)
			b.WriteByte(' ')
		}
	}
	b.WriteString("then")
	var acts []string
	switch r.Action {
	case bpf.FlowDrop:
		acts = append(acts, "discard")
	case bpf.FlowLimit:
		unit := "pps"
		if r.RateBytes {
			unit = "bytes"
		}
		acts = append(acts, "rate-limit "+strconv.FormatFloat(r.Rate, 'f', -1, 32)+" "+unit)
	}
	if r.Sample {
		acts = append(acts, "sample")
	}
	if r.Continue {
		acts = append(acts, "continue")
	}
	acts = append(acts, extra...)
	if len(acts) == 0 {
		acts = append(acts, "accept")
	}
	for _, a := range acts {
		b.WriteByte(' ')
		b.WriteString(a)
	}
	return b.String()
}

// ruleID is 12 hex digits of the SHA-256 of the canonical text.
func ruleID(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:6])
}

func componentOf(r *bpf.FlowRule, t int) bpf.FlowComponent {
	switch t {
	case 3:
		return r.Proto
	case 4:
		return r.Port
	case 5:
		return r.DstPort
	case 6:
		return r.SrcPort
	case 7:
		return r.ICMPType
	case 8:
		return r.ICMPCode
	case 9:
		return r.TCPFlags
	case 10:
		return r.PacketLength
	case 11:
		return r.DSCP
	case 12:
		return r.Fragment
	case 13:
		return r.FlowLabel
	}
	return nil
}

func prefixText(p *bpf.FlowPrefix) string {
	if p == nil {
		return ""
	}
	if p.Offset != 0 {
		return fmt.Sprintf("%s offset %d", p.Prefix, p.Offset)
	}
	return p.Prefix.String()
}

var numericOps = [...]string{"false", "==", ">", ">=", "<", "<=", "!=", "true"}

// termsText writes a component's terms: "&" joins ANDed terms, a space ORed ones.
func termsText(c bpf.FlowComponent, t int) string {
	var b strings.Builder
	for i, term := range c {
		if i > 0 {
			if term.Op&bpf.FlowAnd != 0 {
				b.WriteByte('&')
			} else {
				b.WriteByte(' ')
			}
		}
		if bitmaskType(t) {
			switch term.Op & (bpf.FlowNot | bpf.FlowMatch) {
			case bpf.FlowNot | bpf.FlowMatch:
				b.WriteString("!=")
			case bpf.FlowNot:
				b.WriteString("!")
			case bpf.FlowMatch:
				b.WriteString("=")
			}
			b.WriteString(bitsText(term.Value, t))
			continue
		}
		op := numericOps[term.Op&(bpf.FlowLT|bpf.FlowGT|bpf.FlowEQ)]
		b.WriteString(op)
		if op != "true" && op != "false" {
			b.WriteString(strconv.FormatUint(term.Value, 10))
		}
	}
	return b.String()
}

var tcpFlagNames = [...]string{"F", "S", "R", "P", "A", "U", "E", "C"}
var fragNames = [...]string{"dont-fragment", "is-fragment", "first-fragment", "last-fragment"}

// bitsText names a bitmask value: TCP flags by letter (as gobgp), fragment
// bits by name joined with "+"; bits with no name in hex.
func bitsText(v uint64, t int) string {
	if t == 9 && v != 0 && v <= 0xff {
		var s string
		for i, n := range tcpFlagNames {
			if v&(1<<i) != 0 {
				s += n
			}
		}
		return s
	}
	if t == 12 && v != 0 && v <= 0x0f {
		var parts []string
		for i, n := range fragNames {
			if v&(1<<i) != 0 {
				parts = append(parts, n)
			}
		}
		return strings.Join(parts, "+")
	}
	return fmt.Sprintf("0x%x", v)
}
