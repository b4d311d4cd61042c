package flowspec

import (
	"net"
	"net/netip"
	"testing"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func nlri4(comps ...bgp.FlowSpecComponentInterface) bgp.AddrPrefixInterface {
	return bgp.NewFlowSpecIPv4Unicast(comps)
}

func extcomms(ecs ...bgp.ExtendedCommunityInterface) []bgp.PathAttributeInterface {
	return []bgp.PathAttributeInterface{bgp.NewPathAttributeExtendedCommunities(ecs)}
}

// TestDecodeActions: how actions decide a rule, beyond what the daemons send.
func TestDecodeActions(t *testing.T) {
	dst := bgp.NewFlowSpecDestinationPrefix(bgp.NewIPAddrPrefix(32, "192.0.2.10"))
	cases := []struct {
		name     string
		attrs    []bgp.PathAttributeInterface
		sampling bool
		action   bpf.FlowAction
		refused  string
	}{
		{"no action: accept", nil, true, bpf.FlowAccept, ""},
		{"sample with sampling", extcomms(bgp.NewTrafficActionExtended(false, true)), true, bpf.FlowAccept, ""},
		{"sample without sampling: refused whole", extcomms(bgp.NewTrafficRateExtended(0, 0), bgp.NewTrafficActionExtended(false, true)), false, bpf.FlowDrop, ReasonAction},
		{"a negative rate: the engine cannot", extcomms(bgp.NewTrafficRateExtended(0, -5)), true, bpf.FlowLimit, ReasonUnsupported},
		{"two rates, one 0: drop", extcomms(bgp.NewTrafficRateExtended(0, 100), bgp.NewTrafficRateExtended(0, 0)), true, bpf.FlowDrop, ""},
		{"two non-zero rates", extcomms(bgp.NewTrafficRateExtended(0, 100), bgp.NewTrafficRateExtended(0, 200)), true, bpf.FlowLimit, ReasonUnsupported},
		{"redirect to a 4-octet AS", extcomms(bgp.NewRedirectFourOctetAsSpecificExtended(4200000000, 7)), true, bpf.FlowAccept, ReasonAction},
		{"redirect to an IPv4 RT", extcomms(bgp.NewRedirectIPv4AddressSpecificExtended("192.0.2.1", 7)), true, bpf.FlowAccept, ReasonAction},
		{"redirect to IPv6", []bgp.PathAttributeInterface{bgp.NewPathAttributeIP6ExtendedCommunities(
			[]bgp.ExtendedCommunityInterface{bgp.NewRedirectIPv6AddressSpecificExtended("2001:db8::1", 7)})}, true, bpf.FlowAccept, ReasonAction},
		{"a route target is no action", extcomms(bgp.NewTwoOctetAsSpecificExtended(bgp.EC_SUBTYPE_ROUTE_TARGET, 65000, 1, true)), true, bpf.FlowAccept, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := decode(nlri4(dst), c.attrs, c.sampling)
			require.Equal(t, c.refused, r.refused, r.detail)
			require.Equal(t, c.action, r.rule.Action)
			require.Equal(t, ruleID(r.text), r.rule.ID)
		})
	}
}

// TestDecodeComponents: components GoBGP decodes but RFC 8955 does not allow.
func TestDecodeComponents(t *testing.T) {
	v6 := bgp.NewFlowSpecIPv6Unicast([]bgp.FlowSpecComponentInterface{
		bgp.NewFlowSpecDestinationPrefix6(bgp.NewIPv6AddrPrefix(64, "2001:db8::"), 16),
		bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_LABEL, []*bgp.FlowSpecComponentItem{bgp.NewFlowSpecComponentItem(bgp.DEC_NUM_OP_EQ, 0x12345)}),
	})
	r := decode(v6, nil, true)
	// Decoded whole, for its text, and refused: an offset is not read as
	// RFC 8956 encodes it.
	require.Equal(t, ReasonUnsupported, r.refused, r.detail)
	require.Contains(t, r.detail, "IPv6 destination prefix offset 16")
	require.Equal(t, &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("0:db8::/64"), Offset: 16}, r.rule.Dst)
	require.Equal(t, bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 0x12345}}, r.rule.FlowLabel)
	require.Equal(t, "ipv6 destination 0:db8::/64 offset 16 label ==74565 then accept", r.text)
	require.Equal(t, r.text, r.rule.Text)
	v6zero := bgp.NewFlowSpecIPv6Unicast([]bgp.FlowSpecComponentInterface{
		bgp.NewFlowSpecDestinationPrefix6(bgp.NewIPv6AddrPrefix(64, "2001:db8::"), 0)})
	r = decode(v6zero, nil, true)
	require.Empty(t, r.refused, r.detail)
	require.Equal(t, &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("2001:db8::/64")}, r.rule.Dst)

	mac := bgp.NewFlowSpecIPv4Unicast([]bgp.FlowSpecComponentInterface{bgp.NewFlowSpecSourceMac(net.HardwareAddr{1, 2, 3, 4, 5, 6})})
	require.Equal(t, ReasonMalformed, decode(mac, nil, true).refused)
	empty := bgp.NewFlowSpecIPv4Unicast([]bgp.FlowSpecComponentInterface{bgp.NewFlowSpecComponent(bgp.FLOW_SPEC_TYPE_IP_PROTO, nil)})
	require.Equal(t, ReasonMalformed, decode(empty, nil, true).refused)
}

// TestStartRefuses: each configuration error names its option.
func TestStartRefuses(t *testing.T) {
	ok := Config{LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr("192.0.2.2"), PeerAS: 65000}}}
	cases := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.LocalAS = 0 }, "local_as: set the AS number of this host"},
		{func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") }, `router_id "2001:db8::1": set an IPv4 address (e.g. the host's)`},
		{func(c *Config) { c.MaxRules = 2000 }, "max_rules 2000: set 1..1024 (0 = 1024)"},
		{func(c *Config) { c.Peers = nil }, "peer: configure at least one [[inputs.xdp_drop.flowspec.peer]]"},
		{func(c *Config) { c.Peers[0].PeerAS = 0 }, "peer 192.0.2.2: peer_as: set the neighbor's AS number"},
		{func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) }, "peer 192.0.2.2: address configured twice"},
		{func(c *Config) {
			c.Peers = []Peer{{Address: netip.MustParseAddr("192.0.2.2"), PeerAS: 1, Passive: true, Port: 1790},
				{Address: netip.MustParseAddr("192.0.2.3"), PeerAS: 1, Passive: true}}
		}, "peer 192.0.2.3: port 179: passive peers share one listening port (1790)"},
		{func(c *Config) { c.OnlyLocalDestinations = true }, "only_local_destinations: no source of the namespace's addresses"},
	}
	for _, c := range cases {
		cfg := ok
		cfg.Peers = append([]Peer(nil), ok.Peers...)
		c.mod(&cfg)
		_, err := Start(cfg, func([]bpf.FlowRule) error { return nil })
		require.EqualError(t, err, c.want)
	}
}
