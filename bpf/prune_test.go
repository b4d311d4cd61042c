//go:build linux

package bpf

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// xlated counts the instructions of the program as the kernel runs it,
// after the verifier removed dead code.
func xlated(t *testing.T, policy Policy) int {
	t.Helper()
	p, err := Load(policy)
	require.NoError(t, err)
	defer p.Close()
	info, err := p.XDP().Info()
	require.NoError(t, err)
	is, err := info.Instructions()
	require.NoError(t, err)
	return len(is)
}

// TestRulesPruned: a policy without rules loads the program compiled
// without the rule code, and the verifier removes every lookup of a
// dimension no rule uses.
func TestRulesPruned(t *testing.T) {
	testns.RequirePrivileged(t)
	src := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	dst := []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
	proto := Rule{Name: "p", Protocols: []uint8{17}}
	ports := Rule{Name: "d", Protocols: []uint8{17}, DstPorts: []PortRange{{53, 53}}}
	srcRule := Rule{Name: "s", SrcPrefixes: src}
	both := Rule{Name: "b", SrcPrefixes: src, DstPrefixes: dst}

	none := xlated(t, Policy{Protocols: []uint8{17}})
	protoOnly := xlated(t, Policy{Rules: []Rule{proto}})
	portsOnly := xlated(t, Policy{Rules: []Rule{ports}})
	srcOnly := xlated(t, Policy{Rules: []Rule{srcRule}})
	prefixes := xlated(t, Policy{Rules: []Rule{both}})
	all := xlated(t, Policy{Rules: []Rule{ports, both}})
	t.Logf("instructions: no rules %d, protocol %d, ports %d, source prefixes %d, both prefixes %d, all %d",
		none, protoOnly, portsOnly, srcOnly, prefixes, all)

	require.Less(t, none, protoOnly, "no rules: the program without the rule code")
	require.Less(t, protoOnly, portsOnly, "no ports: the port code is pruned")
	require.Less(t, protoOnly, srcOnly, "no prefixes: the prefix code is pruned")
	require.Less(t, srcOnly, prefixes, "no destination prefix: its lookup is pruned")
	require.Less(t, prefixes, all)
}
