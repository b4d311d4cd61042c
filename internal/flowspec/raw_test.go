//go:build linux

package flowspec

import (
	"encoding/binary"
	"io"
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// rawPeer is a BGP speaker written out byte by byte, to send UPDATEs no
// implementation would: the receiver connects to it.
type rawPeer struct {
	t    *testing.T
	conn net.Conn
	// notified receives the NOTIFICATIONs the receiver sends (code, subcode).
	notified chan [2]byte
}

func bgpMessage(typ byte, body []byte) []byte {
	m := make([]byte, 19, 19+len(body))
	for i := 0; i < 16; i++ {
		m[i] = 0xff
	}
	binary.BigEndian.PutUint16(m[16:], uint16(19+len(body)))
	m[18] = typ
	return append(m, body...)
}

// startRawPeer listens on 127.0.0.3, accepts the receiver's connection and
// completes the OPEN exchange (AS 65000, both FlowSpec families, 4-octet AS).
func startRawPeer(t *testing.T) (*rawPeer, uint16, func() *rawPeer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.3:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	p := &rawPeer{t: t, notified: make(chan [2]byte, 8)}
	accept := func() *rawPeer {
		t.Helper()
		require.NoError(t, l.(*net.TCPListener).SetDeadline(time.Now().Add(15*time.Second)))
		c, err := l.Accept()
		require.NoError(t, err, "the receiver did not connect")
		t.Cleanup(func() { c.Close() })
		p.conn = c
		typ, _ := p.read()
		require.Equal(t, byte(1), typ, "OPEN expected")
		caps := []byte{
			1, 4, 0, 1, 0, 133, // multiprotocol ipv4 flowspec
			1, 4, 0, 2, 0, 133, // multiprotocol ipv6 flowspec
			65, 4, 0, 0, 0xfd, 0xe8, // 4-octet AS 65000
		}
		open := []byte{4, 0xfd, 0xe8, 0, 90, 127, 0, 0, 3, byte(2 + len(caps)), 2, byte(len(caps))}
		p.write(bgpMessage(1, append(open, caps...)))
		p.write(bgpMessage(4, nil))
		go func() { // note NOTIFICATIONs, drop the rest
			for {
				typ, body, err := p.readErr()
				if err != nil {
					return
				}
				if typ == 3 && len(body) >= 2 {
					p.notified <- [2]byte{body[0], body[1]}
				}
			}
		}()
		return p
	}
	return p, uint16(l.Addr().(*net.TCPAddr).Port), accept
}

func (p *rawPeer) readErr() (byte, []byte, error) {
	if err := p.conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		return 0, nil, err
	}
	h := make([]byte, 19)
	if _, err := io.ReadFull(p.conn, h); err != nil {
		return 0, nil, err
	}
	body := make([]byte, int(binary.BigEndian.Uint16(h[16:]))-19)
	_, err := io.ReadFull(p.conn, body)
	return h[18], body, err
}

func (p *rawPeer) read() (byte, error) {
	p.t.Helper()
	typ, _, err := p.readErr()
	require.NoError(p.t, err)
	return typ, nil
}

func (p *rawPeer) write(m []byte) {
	p.t.Helper()
	_, err := p.conn.Write(m)
	require.NoError(p.t, err)
}

// attr is a path attribute with the extended-length flag.
func attr(flags, typ byte, v []byte) []byte {
	b := []byte{flags | 0x10, typ, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(len(v)))
	return append(b, v...)
}

// announce sends an UPDATE carrying nlris (each with its length octet)
// of afi with the given extended communities.
func (p *rawPeer) announce(afi uint16, ecs [][8]byte, nlris ...[]byte) {
	p.t.Helper()
	mp := []byte{0, byte(afi), 133, 0, 0}
	for _, n := range nlris {
		mp = append(mp, n...)
	}
	attrs := attr(0x40, 1, []byte{2})                                       // ORIGIN incomplete
	attrs = append(attrs, attr(0x40, 2, []byte{2, 1, 0, 0, 0xfd, 0xe8})...) // AS_PATH 65000
	var ec []byte
	for _, e := range ecs {
		ec = append(ec, e[:]...)
	}
	if len(ec) > 0 {
		attrs = append(attrs, attr(0xc0, 16, ec)...)
	}
	attrs = append(attrs, attr(0x80, 14, mp)...)
	body := []byte{0, 0, 0, 0}
	binary.BigEndian.PutUint16(body[2:], uint16(len(attrs)))
	p.write(bgpMessage(2, append(body, attrs...)))
}

// nlri frames components (each with its type octet) with the length octet.
func nlri(comps ...[]byte) []byte {
	var b []byte
	for _, c := range comps {
		b = append(b, c...)
	}
	return append([]byte{byte(len(b))}, b...)
}

func dst4(a string, bits int) []byte {
	ip := netip.MustParseAddr(a).As4()
	return append([]byte{1, byte(bits)}, ip[:(bits+7)/8]...)
}

// num is a numeric component of one-octet values: pairs of op, value.
func num(typ byte, ops ...byte) []byte {
	b := []byte{typ}
	for i := 0; i < len(ops); i += 2 {
		op := ops[i]
		if i == len(ops)-2 {
			op |= 0x80
		}
		b = append(b, op, ops[i+1])
	}
	return b
}

func rateEC(sub byte, rate float32) [8]byte {
	var e [8]byte
	e[0], e[1] = 0x80, sub
	binary.BigEndian.PutUint32(e[4:], math.Float32bits(rate))
	return e
}

var discardEC = rateEC(0x06, 0)

// TestRawUpdates: actions gobgp cannot send (traffic-rate-packets, unknown
// ones, redirect to IP), and malformed NLRIs: RFC 7606 treat-as-withdraw,
// the session stays up and the rules after them arrive.
func TestRawUpdates(t *testing.T) {
	_, port, accept := startRawPeer(t)
	a := &applied{}
	r, err := Start(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.3"), Port: port, PeerAS: 65000}},
		Log:   logTo(t),
	}, a.apply)
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	p := accept()
	waitUp(t, r, 10*time.Second, nil)

	byText := func() map[string]RuleState {
		m := map[string]RuleState{}
		for _, s := range r.Rules() {
			m[s.Text] = s
		}
		return m
	}
	expect := func(text, refused string, want *bpf.FlowRule) {
		t.Helper()
		var s RuleState
		waitFor(t, time.Second, text, func() bool {
			var ok bool
			s, ok = byText()[text]
			return ok
		})
		require.Equal(t, refused, s.Refused, text)
		if want != nil {
			require.Equal(t, withID(*want, text), s.Rule)
		}
	}

	p.announce(1, [][8]byte{rateEC(0x0c, 1000)}, nlri(dst4("192.0.2.1", 32)))
	expect("destination 192.0.2.1/32 then rate-limit 1000 pps", "",
		&bpf.FlowRule{Dst: pfx("192.0.2.1/32"), Action: bpf.FlowLimit, Rate: 1000})
	p.announce(1, [][8]byte{rateEC(0x0c, 0)}, nlri(dst4("192.0.2.2", 32)))
	expect("destination 192.0.2.2/32 then discard", "", &bpf.FlowRule{Dst: pfx("192.0.2.2/32"), Action: bpf.FlowDrop})
	p.announce(1, [][8]byte{{0x80, 0x0a, 0, 0, 0, 0, 0, 1}}, nlri(dst4("192.0.2.3", 32)))
	expect("destination 192.0.2.3/32 then action 0x800a", ReasonAction, nil)
	p.announce(1, [][8]byte{{0x08, 0x00, 192, 0, 2, 99, 0, 0}}, nlri(dst4("192.0.2.4", 32)))
	expect("destination 192.0.2.4/32 then redirect-to-ip", ReasonAction, nil)
	// A route target is no FlowSpec action: ignored.
	p.announce(1, [][8]byte{{0x00, 0x02, 0xfd, 0xe8, 0, 0, 0, 1}, discardEC}, nlri(dst4("192.0.2.5", 32)))
	expect("destination 192.0.2.5/32 then discard", "", &bpf.FlowRule{Dst: pfx("192.0.2.5/32"), Action: bpf.FlowDrop})

	// Malformed, kept by GoBGP: type 13 (flow label) and 14 (an L2VPN
	// type) are no IPv4 components. Refused, never enforced.
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.6", 32), num(14, 0x01, 1)))
	expect("malformed [destination: 192.0.2.6/32][ether-type: ==1]", ReasonMalformed, nil)
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.7", 32), num(13, 0x01, 1)))
	expect("malformed [destination: 192.0.2.7/32][label: ==1]", ReasonMalformed, nil)

	// A component cut short (an operator with no value).
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.11", 32), []byte{3, 0x81}))
	expect("malformed [destination: 192.0.2.11/32][unknown:[3 129]]", ReasonMalformed, nil)

	// Out of order: GoBGP sorts the components before anyone sees them.
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.8", 32), num(5, 0x01, 80), num(3, 0x01, 6)))
	expect("destination 192.0.2.8/32 protocol ==6 destination-port ==80 then discard", "", nil)

	// The session is up and a rule after them all arrives.
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.9", 32)))
	expect("destination 192.0.2.9/32 then discard", "", nil)
	require.True(t, r.Peers()[0].Up)
	set := a.waitRules(t, time.Second, 5)
	for _, x := range set {
		require.NotContains(t, []string{"192.0.2.3/32", "192.0.2.4/32", "192.0.2.6/32", "192.0.2.7/32"}, x.Dst.Prefix.String())
	}
	require.Equal(t, map[string]int{ReasonAction: 2, ReasonMalformed: 3}, r.Peers()[0].Refused)

	// Two NLRIs alike but for a value's width (one octet, two): one rule
	// (GoBGP keys its table by the NLRI's text: the second replaces the first).
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.12", 32), num(3, 0x01, 6)))
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.12", 32), []byte{3, 0x91, 0, 6}))
	waitFor(t, time.Second, "both received", func() bool { return r.Peers()[0].Received == 11 })
	set = a.waitRules(t, time.Second, 6)
	n := 0
	for _, s := range r.Rules() {
		if s.Text == "destination 192.0.2.12/32 protocol ==6 then discard" {
			n++
		}
	}
	require.Equal(t, 1, n)

	// A component type twice: GoBGP does not treat it as withdraw; it
	// resets the session (NOTIFICATION code 0), which withdraws the
	// peer's rules, and the rule is never seen.
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.10", 32), num(3, 0x01, 17), num(3, 0x01, 6)))
	select {
	case n := <-p.notified:
		require.Equal(t, [2]byte{0, 0}, n)
	case <-time.After(5 * time.Second):
		t.Fatal("no NOTIFICATION after a duplicated component")
	}
	a.waitRules(t, time.Second, 0)
	require.Empty(t, r.Rules())
}

// TestRawIPv6Offset: an IPv6 prefix with a non-zero offset, sent by
// RFC 8956 (only the pattern's octets), is refused, and so is GoBGP's
// encoding of it (the whole prefix, as ExaBGP 4 and GoBGP send it); an
// offset of 0 is accepted exact; a rule in a later UPDATE is unaffected.
func TestRawIPv6Offset(t *testing.T) {
	_, port, accept := startRawPeer(t)
	a := &applied{}
	r, err := Start(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.3"), Port: port, PeerAS: 65000}},
		Log:   logTo(t),
	}, a.apply)
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	p := accept()
	waitUp(t, r, 10*time.Second, nil)
	byText := func() map[string]RuleState {
		m := map[string]RuleState{}
		for _, s := range r.Rules() {
			m[s.Text] = s
		}
		return m
	}
	tcp := num(3, 0x01, 6)
	dst6 := func(a string, bits, offset int, octets int) []byte {
		ip := netip.MustParseAddr(a).As16()
		return append([]byte{1, byte(bits), byte(offset)}, ip[offset/8:offset/8+octets]...)
	}

	// Offset 0: both encodings alike.
	p.announce(2, [][8]byte{discardEC}, nlri(dst6("2001:db8::", 64, 0, 8), tcp))
	zero := "ipv6 destination 2001:db8::/64 protocol ==6 then discard"
	a.waitRules(t, time.Second, 1)
	require.Equal(t, withID(bpf.FlowRule{IPv6: true, Dst: pfx("2001:db8::/64"), Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 6}}, Action: bpf.FlowDrop}, zero), a.last()[0])

	// GoBGP's (and ExaBGP 4's) encoding of 2001:db8:0:1::/64 offset 32:
	// the prefix's first 8 octets.
	ip := netip.MustParseAddr("2001:db8:0:1::").As16()
	p.announce(2, [][8]byte{discardEC}, nlri(append([]byte{1, 64, 32}, ip[:8]...), tcp))
	draft := "ipv6 destination 0:0:0:1::/64 offset 32 protocol ==6 then discard"
	waitFor(t, time.Second, draft, func() bool { _, ok := byText()[draft]; return ok })
	require.Equal(t, ReasonUnsupported, byText()[draft].Refused)

	// RFC 8956's: the 4 octets of bits 32..63. GoBGP reads 8: the
	// protocol component and the next NLRI's length octet among them,
	// and the next NLRI from its second octet on (malformed here).
	p.announce(2, [][8]byte{discardEC}, nlri(dst6("2001:db8:0:1::", 64, 32, 4), tcp), nlri(dst6("2001:db8::99", 128, 0, 16)))
	misread := "ipv6 destination 0:0:381:613::/64 offset 32 then discard"
	next := "malformed [unknown:[128 0 32 1 13 184 0 0 0 0 0 0 0 0 0 0 0 153]]"
	waitFor(t, time.Second, misread, func() bool { _, ok := byText()[misread]; return ok })
	require.Equal(t, ReasonUnsupported, byText()[misread].Refused)
	require.Equal(t, ReasonMalformed, byText()[next].Refused)

	// A rule in a later UPDATE is read as sent, and the session stayed up.
	p.announce(2, [][8]byte{discardEC}, nlri(dst6("2001:db8::7", 128, 0, 16)))
	later := "ipv6 destination 2001:db8::7/128 then discard"
	set := a.waitRules(t, time.Second, 2)
	require.ElementsMatch(t, []string{ruleID(zero), ruleID(later)}, []string{set[0].ID, set[1].ID})
	require.Equal(t, "", byText()[later].Refused)
	require.True(t, r.Peers()[0].Up)
	require.Equal(t, map[string]int{ReasonUnsupported: 2, ReasonMalformed: 1}, r.Peers()[0].Refused)
}
