package xdp_drop

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// flowConfigPlugin is a valid plugin with [flowspec] and one peer.
func flowConfigPlugin() *XDPDrop {
	return withDefaults(&XDPDrop{
		Interfaces: []string{"eth1"}, Log: testutil.Logger{},
		FlowSpec: &FlowSpecConfig{LocalAS: 65001, RouterID: "192.0.2.10", Peers: []FlowSpecPeer{{Address: "192.0.2.1", PeerAS: 65000}}},
	})
}

// TestFlowSpecConfigValid: the defaults, and the engine turned on with
// max_rules.
func TestFlowSpecConfigValid(t *testing.T) {
	p := flowConfigPlugin()
	require.NoError(t, p.Init())
	s := p.flow.opts
	require.Equal(t, uint32(65001), s.localAS)
	require.Equal(t, netip.MustParseAddr("192.0.2.10"), s.routerID)
	require.Equal(t, bpf.FlowMaxRules, s.maxRules)
	require.True(t, s.onlyLocal)
	require.Equal(t, []flowSpecPeer{{address: netip.MustParseAddr("192.0.2.1"), port: 179, peerAS: 65000}}, s.peers)
	require.Equal(t, bpf.FlowSpecConfig{On: true, MaxRules: bpf.FlowMaxRules,
		Exempt: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:179")}}, p.links.policy.FlowSpec)
	require.Nil(t, p.links.policy.Rules, "no drop list needed: frames FlowSpec does not drop pass")

	dir := t.TempDir()
	key := filepath.Join(dir, "bgp.md5")
	require.NoError(t, os.WriteFile(key, []byte("  s3cret key \n\n"), 0o600))
	p = flowConfigPlugin()
	p.FlowSpec.MaxRules, p.FlowSpec.OnlyLocalDestinations = ptr(int64(64)), ptr(false)
	p.FlowSpec.Peers = append(p.FlowSpec.Peers, FlowSpecPeer{Address: "2001:db8::1", Port: ptr(int64(1179)), PeerAS: 4200000000, Passive: true, PasswordFile: key})
	require.NoError(t, p.Init())
	require.Equal(t, 64, p.flow.opts.maxRules)
	require.False(t, p.flow.opts.onlyLocal)
	require.Equal(t, flowSpecPeer{address: netip.MustParseAddr("2001:db8::1"), port: 1179, peerAS: 4200000000, passive: true, password: "s3cret key", keyFrom: key}, p.flow.opts.peers[1])
	// The sessions FlowSpec never sees: the peer's port when the host
	// connects out, the host's listening port when it is passive.
	require.Equal(t, bpf.FlowSpecConfig{On: true, MaxRules: 64, Exempt: []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:179"), netip.MustParseAddrPort("[2001:db8::1]:1179"),
	}}, p.links.policy.FlowSpec)
	plan := p.planFlowSpec()
	require.Equal(t, 2, plan.Peers[1].N)
	require.Equal(t, key, plan.Peers[1].KeyFrom)

	// A console view starts no session, and so reads no key.
	p = flowConfigPlugin()
	p.FlowSpec.Peers[0].PasswordFile = filepath.Join(dir, "absent")
	p.Run.Observe, p.Run.ReadOnly = true, true
	require.NoError(t, p.Init())
	require.True(t, p.flow.opts.view)
}

// TestFlowSpecConfigRefused: each bad value is refused by Init with an
// OptionError naming its option, and the peer by position and address.
func TestFlowSpecConfigRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	empty := write("empty.md5", " \n")
	long := write("long.md5", strings.Repeat("k", 81)+"\n")
	twoLines := write("two.md5", "one\ntwo\n")
	cases := []struct {
		name   string
		setup  func(c *FlowSpecConfig)
		key    string
		saying string
	}{
		{"no local_as", func(c *FlowSpecConfig) { c.LocalAS = 0 }, keyFlowLocalAS, "flowspec.local_as is missing"},
		{"local_as negative", func(c *FlowSpecConfig) { c.LocalAS = -1 }, keyFlowLocalAS, "1 to 4294967295"},
		{"local_as over 32 bits", func(c *FlowSpecConfig) { c.LocalAS = 1 << 32 }, keyFlowLocalAS, "out of range"},
		{"no router_id", func(c *FlowSpecConfig) { c.RouterID = "" }, keyFlowRouterID, "router_id is missing"},
		{"router_id IPv6", func(c *FlowSpecConfig) { c.RouterID = "2001:db8::1" }, keyFlowRouterID, "is not IPv4"},
		{"router_id a name", func(c *FlowSpecConfig) { c.RouterID = "host" }, keyFlowRouterID, "is not an IPv4 address"},
		{"router_id zero", func(c *FlowSpecConfig) { c.RouterID = "0.0.0.0" }, keyFlowRouterID, "cannot identify"},
		{"max_rules 0", func(c *FlowSpecConfig) { c.MaxRules = ptr(int64(0)) }, keyFlowMaxRules, "1 to 1024"},
		{"max_rules over", func(c *FlowSpecConfig) { c.MaxRules = ptr(int64(1025)) }, keyFlowMaxRules, "1 to 1024"},
		{"no peer", func(c *FlowSpecConfig) { c.Peers = nil }, keyFlowSpec, "has no peer"},
		{"too many peers", func(c *FlowSpecConfig) {
			c.Peers = nil
			for i := range 17 {
				c.Peers = append(c.Peers, FlowSpecPeer{Address: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}).String(), PeerAS: 65000})
			}
		}, keyFlowPeer, "at most 16"},
		{"no address", func(c *FlowSpecConfig) { c.Peers[0].Address = "" }, "flowspec.peer[1].address", "flowspec.peer 1: address is missing"},
		{"address a name", func(c *FlowSpecConfig) { c.Peers[0].Address = "rr1.example" }, "flowspec.peer[1].address", `flowspec.peer 1 ("rr1.example"): address = "rr1.example" is not an IP address`},
		{"address with port", func(c *FlowSpecConfig) { c.Peers[0].Address = "192.0.2.1:179" }, "flowspec.peer[1].address", "port is its own option"},
		{"address unspecified", func(c *FlowSpecConfig) { c.Peers[0].Address = "::" }, "flowspec.peer[1].address", "no peer's address"},
		{"address twice", func(c *FlowSpecConfig) {
			c.Peers = append(c.Peers, FlowSpecPeer{Address: "192.0.2.1", PeerAS: 65002})
		}, "flowspec.peer[2].address", `flowspec.peer 2 ("192.0.2.1"): address is also peer 1's`},
		{"port 0", func(c *FlowSpecConfig) { c.Peers[0].Port = ptr(int64(0)) }, "flowspec.peer[1].port", "1 to 65535"},
		{"port over", func(c *FlowSpecConfig) { c.Peers[0].Port = ptr(int64(65536)) }, "flowspec.peer[1].port", "1 to 65535"},
		{"no peer_as", func(c *FlowSpecConfig) { c.Peers[0].PeerAS = 0 }, "flowspec.peer[1].peer_as", "peer_as is missing"},
		{"peer_as over", func(c *FlowSpecConfig) { c.Peers[0].PeerAS = 1 << 32 }, "flowspec.peer[1].peer_as", "out of range"},
		{"password_file relative", func(c *FlowSpecConfig) { c.Peers[0].PasswordFile = "bgp.md5" }, "flowspec.peer[1].password_file", "not an absolute path"},
		{"password_file absent", func(c *FlowSpecConfig) { c.Peers[0].PasswordFile = filepath.Join(dir, "absent") }, "flowspec.peer[1].password_file", "no such file"},
		{"password_file empty", func(c *FlowSpecConfig) { c.Peers[0].PasswordFile = empty }, "flowspec.peer[1].password_file", "is empty"},
		{"password_file long", func(c *FlowSpecConfig) { c.Peers[0].PasswordFile = long }, "flowspec.peer[1].password_file", "over 80 bytes"},
		{"password_file two lines", func(c *FlowSpecConfig) { c.Peers[0].PasswordFile = twoLines }, "flowspec.peer[1].password_file", "more than one line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := flowConfigPlugin()
			c.setup(p.FlowSpec)
			err := p.Init()
			require.Error(t, err)
			var found bool
			for _, e := range Errors(err) {
				var oe *OptionError
				if errors.As(e, &oe) && oe.Key == c.key {
					require.Contains(t, e.Error(), c.saying)
					require.NotContains(t, e.Error(), strings.Repeat("k", 81), "never the key")
					found = true
				}
			}
			require.True(t, found, "no error names %s: %v", c.key, err)
		})
	}
}

// TestFlowSpecPasswordFileTrust: a key file another user may write is
// refused, as the config's other files are.
func TestFlowSpecPasswordFileTrust(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "bgp.md5")
	require.NoError(t, os.WriteFile(key, []byte("key\n"), 0o600))
	require.NoError(t, os.Chmod(key, 0o666))
	p := flowConfigPlugin()
	p.FlowSpec.Peers[0].PasswordFile = key
	p.TrustPrefixFiles(os.Getuid())
	err := p.Init()
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "flowspec.peer[1].password_file", oe.Key)
	require.Contains(t, err.Error(), "writable")
}

// TestFlowPeerPointFields: a peer's point has every reason's field, at
// zero too, and last_update_s -1 before an UPDATE.
func TestFlowPeerPointFields(t *testing.T) {
	acc := &testutil.Accumulator{}
	emitSnapshot(acc, &Snapshot{Time: time.Unix(0, 0), FlowPeers: []FlowPeerSeries{{
		Peer: "192.0.2.1", State: "active", LastUpdateS: -1, RefusedBy: []int64{0, 0, 2, 0, 0, 0}, Refused: 2,
	}}})
	testutil.RequireMetricsEqual(t, []telegraf.Metric{testutil.MustMetric(MeasurementFlowSpecPeer,
		map[string]string{TagPeer: "192.0.2.1"},
		map[string]any{
			FieldState: "active", FieldUp: false, FieldUptimeS: int64(0), FieldReceived: int64(0), FieldAccepted: int64(0),
			FieldRefused: int64(2), "refused_only_local_destinations": int64(0), "refused_max_rules": int64(0),
			"refused_action": int64(2), "refused_unsupported": int64(0), "refused_malformed": int64(0), "refused_capacity": int64(0), FieldLastUpdateS: int64(-1),
		}, time.Unix(0, 0))}, acc.GetTelegrafMetrics())
}
