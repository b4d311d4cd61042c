//go:build linux

package sockdiag

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TCP states as the kernel numbers them (include/net/tcp_states.h).
const (
	tcpSynRecv  = 3
	tcpTimeWait = 6
	tcpListen   = 10
)

// newNS returns a test namespace with its loopback up, IPv6 on it.
func newNS(t testing.TB) *testns.NS {
	t.Helper()
	n := testns.New(t)
	require.NoError(t, n.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6", []byte("0"), 0)
	}))
	lo, err := n.Netlink().LinkByName("lo")
	require.NoError(t, err)
	require.NoError(t, n.Netlink().LinkSetUp(lo))
	return n
}

// listen opens a TCP listener inside n; control, if not nil, sets options
// on its socket before it listens.
func listen(t testing.TB, n *testns.NS, addr string, control func(fd uintptr) error) net.Listener {
	t.Helper()
	lc := net.ListenConfig{}
	if control != nil {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var cerr error
			if err := c.Control(func(fd uintptr) { cerr = control(fd) }); err != nil {
				return err
			}
			return cerr
		}
	}
	var l net.Listener
	require.NoError(t, n.Do(func() error {
		var err error
		l, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	}))
	t.Cleanup(func() { l.Close() })
	return l
}

// connect dials l's address from inside n, with the given address, and
// returns the client's end and the flow the server receives from it.
func connect(t testing.TB, n *testns.NS, l net.Listener, addr string) (net.Conn, net.Conn, Flow) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var client net.Conn
	require.NoError(t, n.Do(func() error {
		var err error
		client, err = net.Dial("tcp", addr)
		return err
	}))
	t.Cleanup(func() { client.Close() })
	server, ok := <-accepted
	require.True(t, ok, "accept failed")
	t.Cleanup(func() { server.Close() })
	return client, server, flowOf(server)
}

// flowOf is the flow a frame arriving at c's socket shows.
func flowOf(c net.Conn) Flow {
	return Flow{
		Src: c.RemoteAddr().(*net.TCPAddr).AddrPort(),
		Dst: c.LocalAddr().(*net.TCPAddr).AddrPort(),
	}
}

func reversed(f Flow) Flow { return Flow{Src: f.Dst, Dst: f.Src} }

func withSrcPort(f Flow, port uint16) Flow {
	return Flow{Src: netip.AddrPortFrom(f.Src.Addr(), port), Dst: f.Dst}
}

func mapped(f Flow) Flow {
	m := func(a netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
	}
	return Flow{Src: m(f.Src), Dst: m(f.Dst)}
}

// state is the state of the socket the kernel finds for f in ns, 0 for none.
func state(t testing.TB, ns string, f Flow) uint8 {
	t.Helper()
	var fd int
	require.NoError(t, nsthread.In(ns, func() error {
		var err error
		fd, err = open()
		return err
	}))
	defer unix.Close(fd)
	s, err := lookup(fd, 1, f)
	require.NoError(t, err)
	return s
}

// waitState waits until the kernel's socket for f in ns is in state want.
func waitState(t testing.TB, ns string, f Flow, want uint8) {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for state(t, ns, f) != want {
		if time.Now().After(deadline) {
			t.Fatalf("socket of %v in state %d after %s, want %d", f, state(t, ns, f), testns.Hang, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// otherPort is a source port other than the flow's.
func otherPort(f Flow) uint16 {
	if f.Src.Port() == 65535 {
		return 1
	}
	return f.Src.Port() + 1
}

// TestEstablishedIPv4: a connection over loopback is established both
// ways; the same flow from another source port, or towards a listener
// that accepted nothing from it, is not, though the kernel answers those
// with the listener.
func TestEstablishedIPv4(t *testing.T) {
	n := newNS(t)
	l := listen(t, n, "127.0.0.1:0", nil)
	_, _, f := connect(t, n, l, l.Addr().String())
	idle := listen(t, n, "127.0.0.1:0", nil)
	toIdle := Flow{Src: f.Src, Dst: idle.Addr().(*net.TCPAddr).AddrPort()}
	wrong := withSrcPort(f, otherPort(f))

	for _, ns := range []string{n.Name, n.Path} {
		got, err := Established(ns, []Flow{f, reversed(f), wrong, toIdle})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, false, false}, got, "namespace %s", ns)
	}
	require.Equal(t, uint8(tcpEstablished), state(t, n.Name, f))
	require.Equal(t, uint8(tcpListen), state(t, n.Name, wrong), "the kernel's fallback to the listener")
	require.Equal(t, uint8(tcpListen), state(t, n.Name, toIdle))
}

// TestTimeWait: a connection the host closed first leaves a TIME_WAIT
// socket, which the kernel finds and which is not established.
func TestTimeWait(t *testing.T) {
	n := newNS(t)
	l := listen(t, n, "127.0.0.1:0", nil)
	client, server, f := connect(t, n, l, l.Addr().String())
	got, err := Established(n.Name, []Flow{f})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, got)

	require.NoError(t, server.Close())
	_, err = io.Copy(io.Discard, client)
	require.NoError(t, err)
	require.NoError(t, client.Close())
	waitState(t, n.Name, f, tcpTimeWait)

	got, err = Established(n.Name, []Flow{f, reversed(f)})
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, got)
}

// TestSynRecv: a handshake the listener holds half-open (TCP_DEFER_ACCEPT
// drops the client's bare ACK) leaves a request socket in SYN_RECV, which
// is not established, while the client's end is.
func TestSynRecv(t *testing.T) {
	n := newNS(t)
	l := listen(t, n, "127.0.0.1:0", func(fd uintptr) error {
		return unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 60)
	})
	var client net.Conn
	require.NoError(t, n.Do(func() error {
		var err error
		client, err = net.Dial("tcp", l.Addr().String())
		return err
	}))
	defer client.Close()
	f := reversed(flowOf(client))
	waitState(t, n.Name, f, tcpSynRecv)

	got, err := Established(n.Name, []Flow{f, reversed(f)})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, got)
}

// TestIPv6: a connection over ::1 is established; from another port it is not.
func TestIPv6(t *testing.T) {
	n := newNS(t)
	l := listen(t, n, "[::1]:0", nil)
	_, _, f := connect(t, n, l, l.Addr().String())
	require.True(t, f.Src.Addr().Is6() && !f.Src.Addr().Is4In6(), "flow %v", f)

	got, err := Established(n.Name, []Flow{f, withSrcPort(f, otherPort(f))})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false}, got)
}

// TestMapped: IPv4-mapped addresses are asked as IPv4, which also finds an
// IPv4 connection accepted by a dual-stack listener; a flow of two
// families is no socket's.
func TestMapped(t *testing.T) {
	n := newNS(t)
	l := listen(t, n, "127.0.0.1:0", nil)
	_, _, f := connect(t, n, l, l.Addr().String())
	dual := listen(t, n, "[::]:0", nil)
	_, _, fd := connect(t, n, dual, fmt.Sprintf("127.0.0.1:%d", dual.Addr().(*net.TCPAddr).Port))
	plain := Flow{Src: netip.AddrPortFrom(fd.Src.Addr().Unmap(), fd.Src.Port()), Dst: netip.AddrPortFrom(fd.Dst.Addr().Unmap(), fd.Dst.Port())}
	require.True(t, plain.Src.Addr().Is4())
	mixed := Flow{Src: f.Src, Dst: netip.AddrPortFrom(netip.IPv6Loopback(), f.Dst.Port())}

	got, err := Established(n.Name, []Flow{mapped(f), fd, plain, mapped(plain), mixed, {}})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, true, false, false}, got)
}

// TestOtherNamespace: a namespace's connections are not visible from
// another namespace, nor from the process's own.
func TestOtherNamespace(t *testing.T) {
	a, b := newNS(t), newNS(t)
	l := listen(t, a, "127.0.0.1:0", nil)
	_, _, f := connect(t, a, l, l.Addr().String())

	for ns, want := range map[string]bool{a.Name: true, b.Name: false, "": false} {
		got, err := Established(ns, []Flow{f})
		require.NoError(t, err)
		require.Equal(t, []bool{want}, got, "namespace %q", ns)
	}
	_, err := Established(a.Name+"-missing", []Flow{f})
	require.ErrorContains(t, err, a.Name+"-missing")
}

// TestBound: a call takes at most MaxFlows flows.
func TestBound(t *testing.T) {
	n := newNS(t)
	l := listen(t, n, "127.0.0.1:0", nil)
	_, _, f := connect(t, n, l, l.Addr().String())
	flows := make([]Flow, MaxFlows+1)
	for i := range flows {
		flows[i] = f
	}
	_, err := Established(n.Name, flows)
	require.ErrorContains(t, err, "65 flows asked at once, at most 64 a call")

	got, err := Established(n.Name, flows[:MaxFlows])
	require.NoError(t, err)
	require.Len(t, got, MaxFlows)
	for i, ok := range got {
		require.True(t, ok, "flow %d", i)
	}
	got, err = Established(n.Name, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// BenchmarkLookup measures one exact lookup on an open socket, with one
// connection in the namespace and with thousands: the lookup is by hash,
// so the figure should not grow with them.
func BenchmarkLookup(b *testing.B) {
	n := newNS(b)
	l := listen(b, n, "127.0.0.1:0", nil)
	_, _, f := connect(b, n, l, l.Addr().String())
	var fd int
	require.NoError(b, nsthread.In(n.Name, func() error {
		var err error
		fd, err = open()
		return err
	}))
	defer unix.Close(fd)
	var seq uint32
	bench := func(b *testing.B) {
		for b.Loop() {
			seq++
			s, err := lookup(fd, seq, f)
			if err != nil || s != tcpEstablished {
				b.Fatalf("state %d, %v", s, err)
			}
		}
	}
	b.Run("connections=1", bench)
	const more = 2000
	for range more {
		connect(b, n, l, l.Addr().String())
	}
	b.Run(fmt.Sprintf("connections=%d", more+1), bench)
}

// BenchmarkEstablished measures a call of one flow and of MaxFlows flows,
// the namespace entered and the socket opened each time.
func BenchmarkEstablished(b *testing.B) {
	n := newNS(b)
	l := listen(b, n, "127.0.0.1:0", nil)
	_, _, f := connect(b, n, l, l.Addr().String())
	for _, count := range []int{1, MaxFlows} {
		flows := make([]Flow, count)
		for i := range flows {
			flows[i] = f
		}
		b.Run(fmt.Sprintf("flows=%d", count), func(b *testing.B) {
			for b.Loop() {
				got, err := Established(n.Name, flows)
				if err != nil || !got[0] {
					b.Fatalf("%v, %v", got, err)
				}
			}
		})
	}
}
