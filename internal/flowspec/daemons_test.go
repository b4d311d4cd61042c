//go:build linux

package flowspec

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// freePort returns a TCP port free on addr now.
func freePort(t *testing.T, addr string) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	require.NoError(t, err)
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// syncBuffer collects a daemon's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// gobgpd is a Debian gobgpd the test runs as a route server.
type gobgpd struct {
	t        *testing.T
	addr     string // its BGP address
	port     uint16 // its BGP port (0: it listens on none)
	grpc     string
	conf     string
	cmd      *exec.Cmd
	out      *syncBuffer
	exited   chan struct{}
	neighbor gobgpNeighbor
}

// gobgpNeighbor is the receiver as gobgpd's neighbor.
type gobgpNeighbor struct {
	addr        string // the receiver's address
	as          uint32
	passive     bool   // gobgpd waits for the receiver
	remotePort  uint16 // gobgpd connects to this port (when not passive)
	holdTime    int    // 0: gobgpd's default
	password    string
	gracefulSec int // 0: no graceful restart
}

func needBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
			t.Fatalf("%s not installed (apt-get install gobgpd exabgp)", name)
		}
		t.Skipf("%s not installed (apt-get install gobgpd exabgp)", name)
	}
	return p
}

// startGobgpd runs gobgpd with AS 65000 on addr and waits for its API; it
// fails the test at once when gobgpd cannot start.
func startGobgpd(t *testing.T, addr string, listen bool, n gobgpNeighbor) *gobgpd {
	t.Helper()
	needBinary(t, "gobgpd")
	needBinary(t, "gobgp")
	g := &gobgpd{t: t, addr: addr, neighbor: n, grpc: fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))}
	if listen {
		g.port = freePort(t, addr)
	}
	g.conf = filepath.Join(t.TempDir(), "gobgpd.toml")
	require.NoError(t, os.WriteFile(g.conf, []byte(g.config()), 0o600))
	g.start()
	t.Cleanup(g.kill)
	return g
}

func (g *gobgpd) config() string {
	port := -1
	if g.port != 0 {
		port = int(g.port)
	}
	n := g.neighbor
	var b strings.Builder
	fmt.Fprintf(&b, "[global.config]\n  as = 65000\n  router-id = %q\n  port = %d\n  local-address-list = [%q]\n", g.addr, port, g.addr)
	fmt.Fprintf(&b, "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = %q\n    peer-as = %d\n", n.addr, n.as)
	if n.password != "" {
		fmt.Fprintf(&b, "    auth-password = %q\n", n.password)
	}
	fmt.Fprintf(&b, "  [neighbors.transport.config]\n    passive-mode = %v\n    local-address = %q\n", n.passive, g.addr)
	if n.remotePort != 0 {
		fmt.Fprintf(&b, "    remote-port = %d\n", n.remotePort)
	}
	if n.holdTime != 0 {
		fmt.Fprintf(&b, "  [neighbors.timers.config]\n    hold-time = %d\n    keepalive-interval = 1\n    connect-retry = 1\n", n.holdTime)
	} else {
		fmt.Fprintf(&b, "  [neighbors.timers.config]\n    connect-retry = 1\n")
	}
	if n.gracefulSec != 0 {
		fmt.Fprintf(&b, "  [neighbors.graceful-restart.config]\n    enabled = true\n    restart-time = %d\n", n.gracefulSec)
	}
	for _, f := range []string{"ipv4-flowspec", "ipv6-flowspec"} {
		fmt.Fprintf(&b, "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = %q\n", f)
		if n.gracefulSec != 0 {
			fmt.Fprintf(&b, "    [neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true\n")
		}
	}
	return b.String()
}

func (g *gobgpd) start() {
	t := g.t
	t.Helper()
	g.out = &syncBuffer{}
	g.cmd = testproc.Command("gobgpd", "-f", g.conf, "--api-hosts", g.grpc, "-p", "--pprof-disable", "-l", "debug")
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	require.NoError(t, g.cmd.Start(), "start gobgpd")
	g.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(g.cmd, g.exited)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-g.exited:
			t.Fatalf("gobgpd exited at start:\n%s", g.out.String())
		default:
		}
		if _, err := g.cliErr("global"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gobgpd's API at %s did not answer within 10 s:\n%s", g.grpc, g.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *gobgpd) kill() {
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Signal(syscall.SIGCONT)
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

func (g *gobgpd) signal(s syscall.Signal) {
	require.NoError(g.t, g.cmd.Process.Signal(s))
}

func (g *gobgpd) cliErr(args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(g.grpc)
	c := exec.Command("gobgp", append([]string{"-u", host, "-p", port}, args...)...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// cli runs the gobgp CLI against this gobgpd.
func (g *gobgpd) cli(args ...string) string {
	g.t.Helper()
	out, err := g.cliErr(args...)
	require.NoError(g.t, err, "gobgp %s: %s", strings.Join(args, " "), out)
	return out
}

// fields splits a gobgp CLI line as the shell would, for rule texts.
func fields(s string) []string { return strings.Fields(s) }

// applied records what the receiver applies.
type applied struct {
	mu    sync.Mutex
	sets  [][]bpf.FlowRule
	calls int
	fail  error
}

func (a *applied) apply(rules []bpf.FlowRule) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.fail != nil {
		return a.fail
	}
	a.sets = append(a.sets, append([]bpf.FlowRule(nil), rules...))
	return nil
}

func (a *applied) last() []bpf.FlowRule {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sets) == 0 {
		return nil
	}
	return a.sets[len(a.sets)-1]
}

// waitFor polls cond every 10 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitRules waits until the last set applied has n rules.
func (a *applied) waitRules(t *testing.T, within time.Duration, n int) []bpf.FlowRule {
	t.Helper()
	waitFor(t, within, fmt.Sprintf("%d rules applied", n), func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.sets) > 0 && len(a.sets[len(a.sets)-1]) == n
	})
	return a.last()
}

// waitUp waits until the receiver's peer is established.
func waitUp(t *testing.T, r *Receiver, within time.Duration, g *gobgpd) {
	t.Helper()
	waitFor(t, within, "peer established", func() bool {
		for _, p := range r.Peers() {
			if !p.Up {
				return false
			}
		}
		return true
	})
	_ = g
}

func logTo(t *testing.T) func(byte, string) {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
	return func(l byte, m string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Logf("%c %s", l, m)
		}
	}
}

// startReceiver connects to g (an active receiver peering with gobgpd).
func startReceiver(t *testing.T, g *gobgpd, mod func(*Config)) (*Receiver, *applied) {
	t.Helper()
	cfg := Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr(g.addr), Port: g.port, PeerAS: 65000}},
		LocalPrefixes: func() []netip.Prefix {
			return []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")}
		},
		Sampling: true,
		Log:      logTo(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	a := &applied{}
	r, err := Start(cfg, a.apply)
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	return r, a
}
