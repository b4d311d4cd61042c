// Package flowspec receives BGP FlowSpec rules (RFC 8955, RFC 8956) from
// route reflectors or route servers and hands the accepted set, in
// RFC 8955 §5.1 order, to the kernel's engine. The Receiver runs GoBGP
// in its process; StartSpeaker runs a Receiver in a process of its own
// (see Speaker), which is how the plugin runs it.
//
// Memory is bounded: GoBGP keeps at most 5×MaxRules paths per family and
// peer (a peer sending more is reset with a CEASE, maximum number of
// prefixes reached, and its rules are withdrawn); of the rules received
// the receiver tracks MaxRules accepted ones per family and at most
// 4×MaxRules refused ones per family (the oldest refused dropped first
// from Rules(); they stay refused).
//
// Malformed NLRIs (RFC 7606): GoBGP treats an UPDATE with a malformed
// attribute as a withdrawal (its treat-as-withdraw is on), sorts
// components sent out of order before anyone sees them, and resets the
// session (NOTIFICATION, code 0) for an NLRI with a component type twice,
// which withdraws that peer's rules. An NLRI GoBGP keeps but that does not
// decode, or holds a component type its family does not have, is refused
// here as malformed: never enforced.
//
// IPv6 prefix offsets: GoBGP decodes a prefix component by
// draft-ietf-idr-flow-spec-v6-06, not RFC 8956, which encodes a non-zero
// offset differently; a rule with a non-zero offset is refused
// (unsupported). See offsetRefusal.
package flowspec

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Config is the receiver's configuration.
type Config struct {
	LocalAS               uint32
	RouterID              netip.Addr
	MaxRules              int // per family; 0 = bpf.FlowMaxRules
	OnlyLocalDestinations bool
	Peers                 []Peer
	// LocalPrefixes returns the namespace's addresses (only_local_destinations).
	LocalPrefixes func() []netip.Prefix
	// Sampling tells whether the sample action can be honoured; without
	// it a rule asking for samples is refused (action), never half applied.
	Sampling bool
	Log      func(level byte, msg string) // 'E','W','I','D'

	// HoldTime is the BGP hold time offered (0 = 90 s; at least 3 s).
	HoldTime time.Duration
	// RestartTime is the graceful-restart time advertised (0 = 120 s).
	RestartTime time.Duration
}

// Peer is one BGP neighbor.
type Peer struct {
	Address  netip.Addr
	Port     uint16 // 0 = 179; a passive peer: the port to listen on
	PeerAS   uint32
	Passive  bool
	Password string // TCP MD5 (RFC 2385); "" = none
}

// PeerState is what Peers reports of a neighbor.
type PeerState struct {
	Address            netip.Addr
	Port               uint16
	State              string // idle|connect|active|opensent|openconfirm|established
	Up                 bool
	Uptime             time.Duration
	Received, Accepted int
	Refused            map[string]int // by reason
	LastUpdate         time.Time
}

// RuleState is one rule received.
type RuleState struct {
	Rule    bpf.FlowRule
	Text    string // canonical
	Peer    netip.Addr
	Refused string // "" or a reason key
}

// Receiver is a running FlowSpec BGP speaker.
type Receiver struct {
	cfg   Config
	apply func([]bpf.FlowRule) error
	srv   *server.BgpServer

	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}
	loopWG sync.WaitGroup
	stop   sync.Once

	mu         sync.Mutex
	rules      []RuleState
	counts     map[netip.Addr]*peerCounts
	lastUpdate map[netip.Addr]time.Time
	eor        map[netip.Addr]map[string]bool // families that sent End-of-RIB
	adopted    []bpf.FlowRule
	adoptUntil time.Time
	refreshes  uint64 // rule sets decided, for the speaker process

	// Owned by the loop goroutine.
	seq         map[string]uint64
	nextSeq     uint64
	logged      map[string]string
	lastApplied []bpf.FlowRule
	applyErr    string
	capacity    map[string]bool // IDs the engine had no room for in the set in force
}

type peerCounts struct {
	received, accepted int
	refused            map[string]int
}

var families = []*api.Family{
	{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_FLOW_SPEC_UNICAST},
	{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_FLOW_SPEC_UNICAST},
}

const debounce = 100 * time.Millisecond

// Start runs the BGP speaker and its peers. apply gets the whole accepted
// set of both families in RFC 8955 §5.1 order, at most every 100 ms after
// a change and never concurrently; a failed apply is retried after a
// second. An error with a RefusedIDs() []string method (the engine's
// *bpf.FlowCapacityError) is no failure: the set is in force but for the
// rules it names, which are refused as capacity until the next change of
// the set, which is passed whole again.
func Start(cfg Config, apply func(rules []bpf.FlowRule) error) (*Receiver, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Receiver{
		cfg: cfg, apply: apply,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		counts: map[netip.Addr]*peerCounts{}, lastUpdate: map[netip.Addr]time.Time{},
		eor: map[netip.Addr]map[string]bool{}, seq: map[string]uint64{}, logged: map[string]string{},
		lastApplied: []bpf.FlowRule{}, // the engine starts empty, or with what Adopt says
	}
	r.srv = server.NewBgpServer(server.LoggerOption(&logger{log: r.log, level: log.InfoLevel}))
	go r.srv.Serve()

	listenPort, listenAddrs := int32(-1), []string(nil)
	for _, p := range cfg.Peers {
		if !p.Passive {
			continue
		}
		listenPort = int32(portOr179(p.Port))
		listenAddrs = appendUnique(listenAddrs, listenAddress(p.Address))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	if err := r.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: cfg.LocalAS, RouterId: cfg.RouterID.String(), ListenPort: listenPort, ListenAddresses: listenAddrs,
	}}); err != nil {
		r.srv.Stop()
		cancel()
		return nil, fmt.Errorf("start BGP (local_as %d, router_id %s, listen port %d): %w", cfg.LocalAS, cfg.RouterID, listenPort, err)
	}
	if err := r.watch(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	for _, p := range cfg.Peers {
		if err := r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: r.peerConfig(p)}); err != nil {
			r.Stop()
			return nil, fmt.Errorf("peer %s: %w", p.Address, err)
		}
	}
	r.adoptUntil = time.Now().Add(max(cfg.holdTime(), cfg.restartTime()))
	r.loopWG.Add(1)
	go r.loop()
	return r, nil
}

func (c *Config) check() error {
	if c.LocalAS == 0 {
		return errors.New("local_as: set the AS number of this host")
	}
	if !c.RouterID.Is4() {
		return fmt.Errorf("router_id %s: set an IPv4 address (e.g. the host's)", quote.Value(c.RouterID.String()))
	}
	if c.MaxRules < 0 || c.MaxRules > bpf.FlowMaxRules {
		return fmt.Errorf("max_rules %d: set 1..%d (0 = %d)", c.MaxRules, bpf.FlowMaxRules, bpf.FlowMaxRules)
	}
	if c.MaxRules == 0 {
		c.MaxRules = bpf.FlowMaxRules
	}
	if c.OnlyLocalDestinations && c.LocalPrefixes == nil {
		return errors.New("only_local_destinations: no source of the namespace's addresses")
	}
	if c.HoldTime != 0 && c.HoldTime < 3*time.Second {
		return fmt.Errorf("hold time %v: set at least 3 s", c.HoldTime)
	}
	if len(c.Peers) == 0 {
		return errors.New("peer: configure at least one [[inputs.xdp_drop.flowspec.peer]]")
	}
	seen, listen := map[netip.Addr]bool{}, uint16(0)
	for i, p := range c.Peers {
		if !p.Address.IsValid() {
			return fmt.Errorf("peer %d: address: set the neighbor's IP address", i+1)
		}
		if seen[p.Address] {
			return fmt.Errorf("peer %s: address configured twice", p.Address)
		}
		seen[p.Address] = true
		if p.PeerAS == 0 {
			return fmt.Errorf("peer %s: peer_as: set the neighbor's AS number", p.Address)
		}
		if p.Passive {
			if listen != 0 && portOr179(p.Port) != listen {
				return fmt.Errorf("peer %s: port %d: passive peers share one listening port (%d)", p.Address, portOr179(p.Port), listen)
			}
			listen = portOr179(p.Port)
		}
	}
	return nil
}

func (c *Config) holdTime() time.Duration {
	if c.HoldTime == 0 {
		return 90 * time.Second
	}
	return c.HoldTime
}

func (c *Config) restartTime() time.Duration {
	if c.RestartTime == 0 {
		return 120 * time.Second
	}
	return c.RestartTime
}

func portOr179(p uint16) uint16 {
	if p == 0 {
		return 179
	}
	return p
}

// listenAddress: a passive peer on loopback is listened for on loopback,
// any other on its family's any address.
func listenAddress(a netip.Addr) string {
	switch {
	case a.Is4() && a.IsLoopback():
		return "127.0.0.1"
	case a.Is4():
		return "0.0.0.0"
	case a.IsLoopback():
		return "::1"
	}
	return "::"
}

func appendUnique(l []string, s string) []string {
	for _, x := range l {
		if x == s {
			return l
		}
	}
	return append(l, s)
}

func (r *Receiver) peerConfig(p Peer) *api.Peer {
	hold := uint64(r.cfg.holdTime() / time.Second)
	pc := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.PeerAS, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: hold, KeepaliveInterval: max(1, hold/3), ConnectRetry: 5, IdleHoldTimeAfterReset: 5,
		}},
		Transport: &api.Transport{PassiveMode: p.Passive},
		// The receiving side of graceful restart: a restarting peer's
		// rules stay (stale) while its restart timer runs.
		GracefulRestart: &api.GracefulRestart{Enabled: true, HelperOnly: true, RestartTime: uint32(r.cfg.restartTime() / time.Second)},
	}
	if !p.Passive {
		pc.Transport.RemotePort = uint32(portOr179(p.Port))
	}
	for _, f := range families {
		pc.AfiSafis = append(pc.AfiSafis, &api.AfiSafi{
			Config:            &api.AfiSafiConfig{Family: f, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
			PrefixLimits:      &api.PrefixLimit{Family: f, MaxPrefixes: uint32(5 * r.cfg.MaxRules)},
		})
	}
	return pc
}

// watch subscribes to what changes the rule set: updates, best paths
// (a graceful-restart timer ending), End-of-RIB and peer states. The
// callbacks only note the time and wake the loop.
func (r *Receiver) watch(ctx context.Context) error {
	adjIn := &api.WatchEventRequest{Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{
		{Type: api.WatchEventRequest_Table_Filter_ADJIN}}}}
	if err := r.srv.WatchEvent(ctx, adjIn, func(ev *api.WatchEventResponse) {
		now := time.Now()
		r.mu.Lock()
		for _, p := range ev.GetTable().GetPaths() {
			if a, err := netip.ParseAddr(p.NeighborIp); err == nil {
				r.lastUpdate[a] = now
			}
		}
		r.mu.Unlock()
		r.wake()
	}); err != nil {
		return fmt.Errorf("watch BGP updates: %w", err)
	}
	best := &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}, Table: &api.WatchEventRequest_Table{
		Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_BEST}}}}
	if err := r.srv.WatchEvent(ctx, best, func(ev *api.WatchEventResponse) {
		if pe := ev.GetPeer(); pe != nil && pe.Peer.GetState().GetSessionState() != api.PeerState_ESTABLISHED {
			if a, err := netip.ParseAddr(pe.Peer.GetState().GetNeighborAddress()); err == nil {
				r.mu.Lock()
				delete(r.eor, a) // a new session sends its End-of-RIB anew
				r.mu.Unlock()
			}
		}
		r.wake()
	}); err != nil {
		return fmt.Errorf("watch BGP best paths: %w", err)
	}
	eor := &api.WatchEventRequest{Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{
		{Type: api.WatchEventRequest_Table_Filter_EOR}}}}
	if err := r.srv.WatchEvent(ctx, eor, func(ev *api.WatchEventResponse) {
		r.mu.Lock()
		for _, p := range ev.GetTable().GetPaths() {
			if a, err := netip.ParseAddr(p.NeighborIp); err == nil && p.Family != nil {
				if r.eor[a] == nil {
					r.eor[a] = map[string]bool{}
				}
				r.eor[a][p.Family.String()] = true
			}
		}
		r.mu.Unlock()
		r.wake()
	}); err != nil {
		return fmt.Errorf("watch BGP End-of-RIB: %w", err)
	}
	return nil
}

func (r *Receiver) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Stop ends the sessions (a CEASE to each peer) and the receiver; apply is
// not called once Stop has returned. GoBGP's Serve loop has no way out
// (BgpServer.Stop ends the peers and listeners, no context reaches it):
// each Start/Stop leaves one parked goroutine and its empty BgpServer.
func (r *Receiver) Stop() {
	r.stop.Do(func() {
		close(r.done)
		r.loopWG.Wait()
		r.cancel()
		r.srv.Stop()
	})
}

// Adopt takes rules handed over by a predecessor (call it right after
// Start): they stay in force (behind the rules received, within max_rules)
// until every peer has sent its initial table, then are dropped unless
// re-announced. A peer that advertised graceful restart has sent it with
// End-of-RIB for each family it negotiated; one that did not sends no
// End-of-RIB, and has sent it once its session is established and no
// UPDATE has come for a second. A peer whose session is not up holds
// them until the deadline: the longer of the hold time and the restart
// time after Start. The engine already enforces them: Adopt does not call
// apply. Rules() gives them their Text (the predecessor's).
func (r *Receiver) Adopt(rules []bpf.FlowRule) {
	r.mu.Lock()
	r.adopted = append([]bpf.FlowRule(nil), rules...)
	r.mu.Unlock()
	r.kickAdopted(rules)
	r.wake()
}

// Peers reports each configured peer.
func (r *Receiver) Peers() []PeerState {
	states := map[string]*api.Peer{}
	_ = r.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: false}, func(p *api.Peer) {
		states[p.GetConf().GetNeighborAddress()] = p
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]PeerState, 0, len(r.cfg.Peers))
	for _, p := range r.cfg.Peers {
		ps := PeerState{Address: p.Address, Port: portOr179(p.Port), State: "idle", Refused: map[string]int{}}
		if st := states[p.Address.String()]; st != nil {
			ps.State = sessionState(st.GetState().GetSessionState())
			ps.Up = st.GetState().GetSessionState() == api.PeerState_ESTABLISHED
			if up := st.GetTimers().GetState().GetUptime(); ps.Up && up != nil {
				ps.Uptime = time.Since(up.AsTime())
			}
		}
		if c := r.counts[p.Address]; c != nil {
			ps.Received, ps.Accepted = c.received, c.accepted
			for k, v := range c.refused {
				ps.Refused[k] = v
			}
		}
		ps.LastUpdate = r.lastUpdate[p.Address]
		out = append(out, ps)
	}
	return out
}

func sessionState(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_CONNECT:
		return "connect"
	case api.PeerState_ACTIVE:
		return "active"
	case api.PeerState_OPENSENT:
		return "opensent"
	case api.PeerState_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_ESTABLISHED:
		return "established"
	}
	return "idle"
}

// Rules reports every rule received: the accepted ones in enforcement
// order, then the refused ones, oldest first, with their reason.
func (r *Receiver) Rules() []RuleState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RuleState(nil), r.rules...)
}

func (r *Receiver) log(level byte, msg string) {
	if r.cfg.Log != nil {
		r.cfg.Log(level, msg)
	}
}

// loop recomputes the rule set after changes, at most every debounce, and
// applies it when it differs from the one in force.
func (r *Receiver) loop() {
	defer r.loopWG.Done()
	timer := time.NewTimer(time.Until(r.adoptUntil))
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-r.done:
			return
		case <-r.kick:
		case <-timer.C:
		}
		if d := time.Until(last.Add(debounce)); d > 0 {
			select {
			case <-r.done:
				return
			case <-time.After(d):
			}
		}
		select {
		case <-r.kick:
		default:
		}
		last = time.Now()
		if retry := r.refresh(); retry > 0 {
			timer.Reset(retry)
		}
	}
}

// kickAdopted makes the handed-over set the one in force.
func (r *Receiver) kickAdopted(rules []bpf.FlowRule) {
	recs := make([]*received, 0, len(rules))
	for i := range rules {
		recs = append(recs, &received{rule: rules[i], comps: encodeComponents(&rules[i])})
	}
	sort.SliceStable(recs, func(i, j int) bool { return compareRules(recs[i], recs[j]) < 0 })
	set := make([]bpf.FlowRule, 0, len(recs))
	for _, x := range recs {
		set = append(set, x.rule)
	}
	r.mu.Lock()
	r.lastApplied = set
	r.mu.Unlock()
}

// capacityError is what apply returns when the engine applied the set but
// for the rules it names (its tables full): bpf.FlowCapacityError.
type capacityError interface{ RefusedIDs() []string }

// refresh reads GoBGP's table, decides each rule, and applies the set.
// It returns when to run again (0: on the next change only).
func (r *Receiver) refresh() time.Duration {
	entries, counts := r.readTable()
	peers := r.peerSessions()
	r.mu.Lock()
	over, recheck := r.adoptOver(peers)
	adopting := len(r.adopted) > 0 && !over
	if !adopting {
		r.adopted = nil
	}
	adopted := r.adopted
	lastApplied := r.lastApplied
	r.mu.Unlock()

	accepted, refused := r.decide(entries, adopted)
	if adopting {
		// A rule handed over that a peer's path put in force again is
		// that peer's from then on: its withdrawal lifts it at once, even
		// while adoption lasts for the others.
		r.mu.Lock()
		r.adopted = reannounced(r.adopted, accepted)
		r.mu.Unlock()
	}
	set := make([]bpf.FlowRule, 0, len(accepted))
	for _, e := range accepted {
		set = append(set, e.rec.rule)
	}

	var retry time.Duration
	if adopting {
		retry = recheck
	}
	if !reflect.DeepEqual(set, lastApplied) {
		var capErr capacityError
		switch err := r.apply(set); {
		case err == nil:
			r.applyErr, r.capacity = "", nil
			lastApplied = set
		case errors.As(err, &capErr):
			// In force but for the rules named; the whole set goes again
			// with the next change, so they get in once there is room.
			r.applyErr, r.capacity = "", map[string]bool{}
			for _, id := range capErr.RefusedIDs() {
				r.capacity[id] = true
			}
			lastApplied = set
		default:
			if msg := err.Error(); msg != r.applyErr {
				r.log('E', fmt.Sprintf("flowspec: applying %d rules: %v (retrying)", len(set), err))
				r.applyErr = msg
			}
			retry = time.Second
		}
	}
	if len(r.capacity) > 0 {
		kept := make([]*entry, 0, len(accepted))
		for _, e := range accepted {
			if !r.capacity[e.rec.rule.ID] {
				kept = append(kept, e)
				continue
			}
			e.reason, e.rec.detail = ReasonCapacity, "the XDP engine's FlowSpec tables are full; it is passed again with the next change of the rule set"
			r.logRefusal(e)
			refused = append(refused, e)
		}
		accepted = kept
	}
	for _, e := range accepted {
		delete(r.logged, e.key)
	}
	for _, pc := range counts {
		pc.finish(entries)
	}
	states := make([]RuleState, 0, len(accepted)+len(refused))
	for _, e := range accepted {
		states = append(states, RuleState{Rule: e.rec.rule, Text: e.rec.text, Peer: e.peer})
	}
	for _, e := range refused {
		states = append(states, RuleState{Rule: e.rec.rule, Text: e.rec.text, Peer: e.peer, Refused: e.reason})
	}
	r.mu.Lock()
	r.rules = states
	r.counts = map[netip.Addr]*peerCounts{}
	for a, pc := range counts {
		r.counts[a] = &pc.peerCounts
	}
	r.lastApplied = lastApplied
	r.refreshes++
	r.mu.Unlock()
	return retry
}

// session is what adoption needs of a peer's session.
type session struct {
	established time.Time       // zero: not established
	families    map[string]bool // negotiated
	gr          bool            // the peer advertised graceful restart: it sends End-of-RIB
}

// peerSessions reads each peer's session from GoBGP.
func (r *Receiver) peerSessions() map[string]session {
	out := map[string]session{}
	_ = r.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		var s session
		if p.GetState().GetSessionState() == api.PeerState_ESTABLISHED {
			s.established = time.Now()
			if up := p.GetTimers().GetState().GetUptime(); up != nil {
				s.established = up.AsTime()
			}
			s.families = map[string]bool{}
			for _, a := range p.GetAfiSafis() {
				if st := a.GetState(); st != nil && st.Enabled && st.Family != nil {
					s.families[st.Family.String()] = true
				}
			}
			for _, c := range p.GetState().GetRemoteCap() {
				if c.MessageIs(&api.GracefulRestartCapability{}) {
					s.gr = true
				}
			}
		}
		out[p.GetConf().GetNeighborAddress()] = s
	})
	return out
}

// quiet is how long a peer without graceful restart must have sent no
// UPDATE, its session established, for its initial table to count as
// received (it sends no End-of-RIB).
const quiet = time.Second

// quietEmpty is how long adoption waits for a peer without graceful
// restart that has sent no UPDATE since its session came up.
const quietEmpty = 10 * time.Second

// adoptOver: every peer has sent its initial table (End-of-RIB for each
// family it negotiated, or, a peer without graceful restart, a second
// without UPDATEs after some came, quietEmpty without any), or the
// deadline passed. Otherwise it returns
// when to look again. Called with r.mu held.
func (r *Receiver) adoptOver(peers map[string]session) (bool, time.Duration) {
	now := time.Now()
	if !now.Before(r.adoptUntil) {
		return true, 0
	}
	recheck := r.adoptUntil.Sub(now)
	over := true
	for _, p := range r.cfg.Peers {
		s := peers[p.Address.String()]
		if s.established.IsZero() {
			over = false
			continue
		}
		eor := true
		for f := range s.families {
			eor = eor && r.eor[p.Address][f]
		}
		if eor {
			continue
		}
		if !s.gr {
			// A second without UPDATEs once some came; a peer that has sent
			// none since its session came up gets quietEmpty, so that a slow
			// start of its table (a loaded route server) never ends adoption
			// before its rules arrive.
			last, wait := s.established, quietEmpty
			if u := r.lastUpdate[p.Address]; u.After(last) {
				last, wait = u, quiet
			}
			if d := last.Add(wait).Sub(now); d > 0 {
				recheck = min(recheck, d)
			} else {
				continue
			}
		}
		over = false
	}
	return over, recheck
}

// reannounced is adopted without the rules accepted from a peer's path
// (not from adoption).
func reannounced(adopted []bpf.FlowRule, accepted []*entry) []bpf.FlowRule {
	fromPeers := make(map[string]bool, len(accepted))
	for _, e := range accepted {
		if !strings.HasPrefix(e.key, "adopted ") {
			fromPeers[e.rec.rule.ID] = true
		}
	}
	kept := adopted[:0:0]
	for _, a := range adopted {
		if !fromPeers[a.ID] {
			kept = append(kept, a)
		}
	}
	return kept
}

// entry is one NLRI of GoBGP's table, decided.
type entry struct {
	key    string
	rec    *received
	peer   netip.Addr // of the best path
	seq    uint64     // first seen
	age    time.Time  // when GoBGP received the best path
	reason string
}

type peerTally struct {
	peerCounts
	paths map[string]*entry // the peer's own path of each NLRI
}

// readTable decodes every path of each FlowSpec NLRI in GoBGP's table (one
// per peer that announces it) and keeps, per NLRI, the best path that this
// host can accept, else the best path: a peer's refused action never
// cancels another peer's rule for the same NLRI. It tallies every path by
// peer.
func (r *Receiver) readTable() (map[string]*entry, map[netip.Addr]*peerTally) {
	entries := map[string]*entry{}
	tallies := map[netip.Addr]*peerTally{}
	var local []netip.Prefix
	if r.cfg.OnlyLocalDestinations {
		local = r.cfg.LocalPrefixes()
	}
	for _, f := range families {
		ipv6 := f.Afi == api.Family_AFI_IP6
		err := r.srv.ListPath(context.Background(), &api.ListPathRequest{
			TableType: api.TableType_GLOBAL, Family: f, EnableAttributeBinary: true,
		}, func(d *api.Destination) {
			key := f.String() + d.Prefix
			var first, best, chosen *entry
			for _, p := range d.Paths {
				a, err := netip.ParseAddr(p.NeighborIp)
				if err != nil {
					continue
				}
				t := tallies[a]
				if t == nil {
					t = &peerTally{peerCounts: peerCounts{refused: map[string]int{}}, paths: map[string]*entry{}}
					tallies[a] = t
				}
				e := &entry{key: key, rec: r.decodePath(p, d.Prefix, ipv6), peer: a, age: p.GetAge().AsTime()}
				r.judge(e, local)
				t.paths[key] = e
				if first == nil {
					first = e
				}
				if p.Best && best == nil {
					best = e
				}
				if e.reason == "" && (chosen == nil || p.Best && chosen != best) {
					chosen = e
				}
			}
			switch {
			case chosen != nil:
				entries[key] = chosen
			case best != nil:
				entries[key] = best
			case first != nil:
				entries[key] = first
			}
		})
		if err != nil {
			r.log('E', fmt.Sprintf("flowspec: reading the BGP table (%s): %v", f, err))
		}
	}
	return entries, tallies
}

func (r *Receiver) decodePath(p *api.Path, prefix string, ipv6 bool) *received {
	nlri, err := apiutil.GetNativeNlri(p)
	if err != nil {
		return malformed(prefix, ipv6, err)
	}
	attrs, err := apiutil.GetNativePathAttributes(p)
	if err != nil {
		return malformed(prefix, ipv6, err)
	}
	rec := decode(nlri, attrs, r.cfg.Sampling)
	if rec.refused == ReasonMalformed {
		// Named by GoBGP's text, which shows what could not be decoded.
		return malformed(prefix, ipv6, errors.New(rec.detail))
	}
	return rec
}

// malformed stands for an NLRI GoBGP kept but could not decode (RFC 7606
// treat-as-withdraw: it is never enforced).
func malformed(prefix string, ipv6 bool, err error) *received {
	rec := &received{refused: ReasonMalformed, detail: err.Error(), text: "malformed " + prefix}
	rec.rule.IPv6 = ipv6
	rec.rule.ID, rec.rule.Text = ruleID(rec.text), rec.text
	return rec
}

// judge refuses a path for what it says (its decoding, its destination):
// the reasons that are the path's own, whoever else announces the NLRI.
func (r *Receiver) judge(e *entry, local []netip.Prefix) {
	e.reason = e.rec.refused
	if e.reason == "" && r.cfg.OnlyLocalDestinations && !coversLocal(e.rec.rule.Dst, local) {
		e.reason, e.rec.detail = ReasonOnlyLocal, "its destination covers no address of this host"
	}
}

// finish counts each path of the peer: refused for its own reason if it
// has one, else as the NLRI's rule fared (accepted, or refused for room).
func (t *peerTally) finish(entries map[string]*entry) {
	for k, own := range t.paths {
		e := entries[k]
		if e == nil {
			continue
		}
		t.received++
		switch {
		case own.reason != "":
			t.refused[own.reason]++
		case e.reason == "":
			t.accepted++
		default:
			t.refused[e.reason]++
		}
	}
}

// decide refuses rules per reason, keeps at most MaxRules per family (the
// first seen ones), and sorts the accepted ones in §5.1 order. Adopted
// rules not received take the room left. Refused rules are kept up to
// 4×MaxRules per family, the newest.
func (r *Receiver) decide(entries map[string]*entry, adopted []bpf.FlowRule) (accepted, refused []*entry) {
	for k := range r.seq {
		if entries[k] == nil {
			delete(r.seq, k)
			delete(r.logged, k)
		}
	}
	// Rules new since the last time are numbered in the order received.
	var fresh []*entry
	for k, e := range entries {
		if _, ok := r.seq[k]; !ok {
			fresh = append(fresh, e)
		}
	}
	sort.Slice(fresh, func(i, j int) bool {
		if !fresh[i].age.Equal(fresh[j].age) {
			return fresh[i].age.Before(fresh[j].age)
		}
		return compareRules(fresh[i].rec, fresh[j].rec) < 0
	})
	for _, e := range fresh {
		r.nextSeq++
		r.seq[e.key] = r.nextSeq
	}
	var candidates [2][]*entry
	var refusedBy [2][]*entry
	ids := map[string]bool{}
	for k, e := range entries {
		e.seq = r.seq[k] // e.reason: set by judge
		fam := family(e.rec.rule.IPv6)
		ids[e.rec.rule.ID] = true
		if e.reason == "" {
			candidates[fam] = append(candidates[fam], e)
		} else {
			refusedBy[fam] = append(refusedBy[fam], e)
		}
	}
	for fam := range candidates {
		c := candidates[fam]
		sort.Slice(c, func(i, j int) bool { return c[i].seq < c[j].seq })
		c = dedupe(c)
		if len(c) > r.cfg.MaxRules {
			for _, e := range c[r.cfg.MaxRules:] {
				e.reason, e.rec.detail = ReasonMaxRules, fmt.Sprintf("more than max_rules (%d) in its family", r.cfg.MaxRules)
				refusedBy[fam] = append(refusedBy[fam], e)
			}
			c = c[:r.cfg.MaxRules]
		}
		room := r.cfg.MaxRules - len(c)
		for i := range adopted {
			a := &adopted[i]
			if family(a.IPv6) != fam || ids[a.ID] || room == 0 {
				continue
			}
			ids[a.ID] = true
			room--
			text := a.Text
			if text == "" { // handed over by a version that kept no text
				text = canonicalText(a, nil)
			}
			c = append(c, &entry{key: "adopted " + a.ID, rec: &received{rule: *a, comps: encodeComponents(a), text: text}})
		}
		sort.SliceStable(c, func(i, j int) bool { return compareRules(c[i].rec, c[j].rec) < 0 })
		accepted = append(accepted, c...)

		rf := refusedBy[fam]
		sort.Slice(rf, func(i, j int) bool { return rf[i].seq < rf[j].seq })
		if n := len(rf) - 4*r.cfg.MaxRules; n > 0 {
			rf = rf[n:]
		}
		refused = append(refused, rf...)
	}
	for _, e := range refusedBy[0] {
		r.logRefusal(e)
	}
	for _, e := range refusedBy[1] {
		r.logRefusal(e)
	}
	return accepted, refused
}

// dedupe keeps the first of rules alike (NLRIs that differ only in how
// they encode a value, e.g. a port in one octet or two): one is enforced,
// under one ID.
func dedupe(c []*entry) []*entry {
	seen := map[string]bool{}
	out := c[:0]
	for _, e := range c {
		if !seen[e.rec.rule.ID] {
			seen[e.rec.rule.ID] = true
			out = append(out, e)
		}
	}
	return out
}

// logRefusal logs a rule's refusal once (again only if its reason changes).
func (r *Receiver) logRefusal(e *entry) {
	if r.logged[e.key] == e.reason {
		return
	}
	r.logged[e.key] = e.reason
	r.log('W', fmt.Sprintf("flowspec: refused rule %s from %s (%s: %s): %s", e.rec.rule.ID, e.peer, e.reason, e.rec.detail, e.rec.text))
}

func family(ipv6 bool) int {
	if ipv6 {
		return 1
	}
	return 0
}

// coversLocal: the rule has no destination, or its destination matches an
// address of the host (of the rule's family).
func coversLocal(dst *bpf.FlowPrefix, local []netip.Prefix) bool {
	if dst == nil {
		return true
	}
	for _, p := range local {
		if dst.Match(p.Addr()) {
			return true
		}
	}
	return false
}
