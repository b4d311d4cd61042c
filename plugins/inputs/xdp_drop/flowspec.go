package xdp_drop

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// FlowSpecConfig is [inputs.xdp_drop.flowspec]: a BGP speaker that takes
// the FlowSpec rules (RFC 8955, RFC 8956) its peers announce and has the
// programs enforce them.
type FlowSpecConfig struct {
	LocalAS               int64          `toml:"local_as"`
	RouterID              string         `toml:"router_id"`
	MaxRules              *int64         `toml:"max_rules"`
	OnlyLocalDestinations *bool          `toml:"only_local_destinations"`
	Peers                 []FlowSpecPeer `toml:"peer"`
}

// FlowSpecPeer is one [[inputs.xdp_drop.flowspec.peer]]: a route reflector
// or route server the rules come from.
type FlowSpecPeer struct {
	Address      string `toml:"address"`
	Port         *int64 `toml:"port"`
	PeerAS       int64  `toml:"peer_as"`
	Passive      bool   `toml:"passive"`
	PasswordFile string `toml:"password_file"`
}

// Bounds and defaults of the flowspec options.
const (
	DefaultFlowSpecMaxRules = bpf.FlowMaxRules
	DefaultBGPPort          = 179
	maxASN                  = 1<<32 - 1
	// maxMD5Key is TCP_MD5SIG_MAXKEYLEN: the longest key TCP MD5 carries.
	maxMD5Key = 80
	// maxPeers bounds the peers: a host takes rules from a few reflectors.
	maxPeers = 16
)

// Keys of the flowspec options, as errors name them; a peer's keys are
// flowspec.peer[N].<key>, N from 1 (peerKey).
const (
	keyFlowSpec          = "flowspec"
	keyFlowLocalAS       = "flowspec.local_as"
	keyFlowRouterID      = "flowspec.router_id"
	keyFlowMaxRules      = "flowspec.max_rules"
	keyFlowPeer          = "flowspec.peer"
	keyFlowOnlyLocalDsts = "flowspec.only_local_destinations"
)

// peerKey is the key of the n-th peer's option (n from 1): the binary
// finds its line by it.
func peerKey(n int, key string) string { return fmt.Sprintf("%s[%d].%s", keyFlowPeer, n, key) }

// flowSpecSettings are the flowspec options parsed.
type flowSpecSettings struct {
	localAS   uint32
	routerID  netip.Addr
	maxRules  int
	onlyLocal bool
	peers     []flowSpecPeer
	// view: a console view (-status, -watch), which starts no session:
	// another instance holds them.
	view bool
}

// flowSpecPeer is a peer parsed; password is never logged nor echoed.
type flowSpecPeer struct {
	address  netip.Addr
	port     uint16
	peerAS   uint32
	passive  bool
	password string
	keyFrom  string // password_file, "" without one
}

// sessions are the peers' BGP sessions, which the FlowSpec rules never
// see: each peer's address and port (the peer's when the host connects
// out, the host's listening port when it is passive: the same option).
func (s *flowSpecSettings) sessions() []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(s.peers))
	for _, p := range s.peers {
		out = append(out, netip.AddrPortFrom(p.address, p.port))
	}
	return out
}

// label names the n-th peer in errors and logs (n from 1).
func peerLabel(n int, address string) string {
	if address == "" {
		return fmt.Sprintf("flowspec.peer %d", n)
	}
	return fmt.Sprintf("flowspec.peer %d (%s)", n, quote.Value(address))
}

// initFlowSpec checks [flowspec] and turns the engine on in the policy;
// nil settings without the table. A view reads no password: it starts no
// session.
func (x *XDPDrop) initFlowSpec(policy *bpf.Policy) error {
	x.flow.opts = nil
	if x.FlowSpec == nil {
		return nil
	}
	view := x.Run.Observe || x.Run.ReadOnly
	s, err := parseFlowSpec(x.FlowSpec, x.files.trustedUID(), view)
	if err != nil {
		return err
	}
	policy.FlowSpec = bpf.FlowSpecConfig{On: true, MaxRules: s.maxRules, Exempt: s.sessions()}
	x.flow.opts = s
	return nil
}

// parseFlowSpec checks [inputs.xdp_drop.flowspec] and reads the peers'
// password files under the trust check for uid (unless trust.NoCheck).
// Every refusal is an *OptionError naming its option.
func parseFlowSpec(c *FlowSpecConfig, uid int, view bool) (*flowSpecSettings, error) {
	s := &flowSpecSettings{maxRules: DefaultFlowSpecMaxRules, onlyLocal: true, view: view}
	var errs []error
	fail := func(key string, err error) {
		if err != nil {
			errs = append(errs, optionError(key, err))
		}
	}
	switch {
	case c.LocalAS == 0:
		fail(keyFlowLocalAS, errors.New("flowspec.local_as is missing or 0; set this host's AS number, 1 to 4294967295, e.g. local_as = 65001 (the peers' neighbor config names it)"))
	case c.LocalAS < 0 || c.LocalAS > maxASN:
		fail(keyFlowLocalAS, fmt.Errorf("flowspec.local_as = %d is out of range; an AS number is 1 to 4294967295", c.LocalAS))
	default:
		s.localAS = uint32(c.LocalAS)
	}
	id, err := parseRouterID(c.RouterID)
	fail(keyFlowRouterID, err)
	s.routerID = id
	if c.MaxRules != nil {
		if n := *c.MaxRules; n < 1 || n > bpf.FlowMaxRules {
			fail(keyFlowMaxRules, fmt.Errorf("flowspec.max_rules = %d is out of range; rules in force per family are 1 to %d (default %d)", n, bpf.FlowMaxRules, DefaultFlowSpecMaxRules))
		} else {
			s.maxRules = int(n)
		}
	}
	if c.OnlyLocalDestinations != nil {
		s.onlyLocal = *c.OnlyLocalDestinations
	}
	switch {
	case len(c.Peers) == 0:
		fail(keyFlowSpec, errors.New("[inputs.xdp_drop.flowspec] has no peer; add [[inputs.xdp_drop.flowspec.peer]] with the address and peer_as of the route reflector or route server that announces the rules, or remove the flowspec table"))
	case len(c.Peers) > maxPeers:
		fail(keyFlowPeer, fmt.Errorf("flowspec: %d peers; at most %d: take the rules from a few route reflectors", len(c.Peers), maxPeers))
	}
	seen := map[netip.Addr]int{}
	for i := range c.Peers {
		p, perrs := parsePeer(i+1, &c.Peers[i], uid, view)
		errs = append(errs, perrs...)
		if !p.address.IsValid() {
			continue
		}
		if first, dup := seen[p.address]; dup {
			errs = append(errs, optionError(peerKey(i+1, "address"), fmt.Errorf("%s: address is also peer %d's; one session per peer address: remove one", peerLabel(i+1, c.Peers[i].Address), first)))
			continue
		}
		seen[p.address] = i + 1
		s.peers = append(s.peers, p)
	}
	return s, errors.Join(errs...)
}

// parseRouterID checks router_id: the BGP identifier, an IPv4 address.
func parseRouterID(raw string) (netip.Addr, error) {
	const want = `; use one of this host's IPv4 addresses, such as router_id = "192.0.2.10": the BGP identifier is an IPv4 address, unique among the peers' neighbors`
	if raw == "" {
		return netip.Addr{}, errors.New("flowspec.router_id is missing" + want)
	}
	a, err := netip.ParseAddr(raw)
	switch {
	case err != nil || a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("flowspec.router_id = %s is not an IPv4 address%s", quote.Value(raw), want)
	case !a.Is4():
		return netip.Addr{}, fmt.Errorf("flowspec.router_id = %s is not IPv4%s", quote.Value(raw), want)
	case a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return netip.Addr{}, fmt.Errorf("flowspec.router_id = %s cannot identify a BGP speaker%s", quote.Value(raw), want)
	}
	return a, nil
}

// parsePeer checks the n-th peer (n from 1).
func parsePeer(n int, c *FlowSpecPeer, uid int, view bool) (flowSpecPeer, []error) {
	label := peerLabel(n, c.Address)
	p := flowSpecPeer{port: DefaultBGPPort, passive: c.Passive}
	var errs []error
	fail := func(key string, format string, args ...any) {
		errs = append(errs, &OptionError{Key: peerKey(n, key), Err: fmt.Errorf("%s: "+format, append([]any{label}, args...)...)})
	}
	if c.Address == "" {
		fail("address", `address is missing; set the peer's IP address, such as address = "192.0.2.1"`)
	} else if a, err := netip.ParseAddr(c.Address); err != nil || a.Zone() != "" {
		fail("address", `address = %s is not an IP address; write the peer's address, such as "192.0.2.1" or "2001:db8::1" (no name, no port: port is its own option)`, quote.Value(c.Address))
	} else if a = a.Unmap(); a.IsUnspecified() || a.IsMulticast() {
		fail("address", "address = %s is no peer's address; write the route reflector's address", quote.Value(c.Address))
	} else {
		p.address = a
	}
	if c.Port != nil {
		if *c.Port < 1 || *c.Port > 65535 {
			fail("port", "port = %d is out of range; use 1 to 65535 (default 179)", *c.Port)
		} else {
			p.port = uint16(*c.Port)
		}
	}
	switch {
	case c.PeerAS == 0:
		fail("peer_as", "peer_as is missing; set the peer's AS number, 1 to 4294967295, e.g. peer_as = 65000")
	case c.PeerAS < 0 || c.PeerAS > maxASN:
		fail("peer_as", "peer_as = %d is out of range; an AS number is 1 to 4294967295", c.PeerAS)
	default:
		p.peerAS = uint32(c.PeerAS)
	}
	if c.PasswordFile != "" {
		p.keyFrom = c.PasswordFile
		if !view {
			pw, err := readMD5Key(c.PasswordFile, uid)
			if err != nil {
				fail("password_file", "%w", err)
			}
			p.password = pw
		}
	}
	return p, errs
}

// readMD5Key is a peer's TCP MD5 key: password_file's content, trimmed,
// read under the trust check for uid. Errors never echo it.
func readMD5Key(path string, uid int) (string, error) {
	const hint = "; write the key the peer's neighbor config sets (TCP MD5, RFC 2385) into it, readable by the service user alone"
	if !strings.HasPrefix(path, "/") || hasControl(path) || len(path) > maxPath {
		return "", fmt.Errorf("password_file = %s is not an absolute path; write it from /, such as \"/etc/telegraf-xdp-drop/bgp.md5\"", quote.Value(path))
	}
	f, _, err := trust.OpenRegular(path, uid, "password_file")
	if err != nil {
		return "", fmt.Errorf("password_file: %w%s", err, hint)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxMD5Key*4+1))
	if err != nil {
		return "", fmt.Errorf("password_file: read %s: %w", path, err)
	}
	key := strings.TrimSpace(string(raw))
	switch {
	case key == "":
		return "", fmt.Errorf("password_file: %s is empty%s", path, hint)
	case len(key) > maxMD5Key:
		return "", fmt.Errorf("password_file: %s holds a key of over %d bytes, the most TCP MD5 carries%s", path, maxMD5Key, hint)
	case strings.ContainsAny(key, "\r\n"):
		return "", fmt.Errorf("password_file: %s holds more than one line; it holds the key alone%s", path, hint)
	}
	return key, nil
}
