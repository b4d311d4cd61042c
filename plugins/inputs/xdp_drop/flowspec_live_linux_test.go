//go:build linux

package xdp_drop

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// stackSink counts, as they come, the frames of each kind that reach the
// stack behind the test veth, and keeps none of them: a stream of tens of
// thousands fits no socket buffer.
type stackSink struct {
	kinds  [][]byte
	counts []atomic.Int64
	others atomic.Int64
	fd     int
	stop   atomic.Bool
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

func be16(v uint16) uint16 { return v<<8 | v>>8 }

// openSink starts counting the frames of kinds that reach the stack; it
// stops when the test ends.
func openSink(t *testing.T, ns *testns.NS, kinds ...[]byte) *stackSink {
	t.Helper()
	s := &stackSink{kinds: kinds, counts: make([]atomic.Int64, len(kinds)), done: make(chan struct{})}
	require.NoError(t, ns.Do(func() error {
		proto := int(be16(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ns.DevIdx}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind the packet socket: %w", err)
		}
		s.fd = fd
		return nil
	}))
	go s.run()
	t.Cleanup(s.close)
	return s
}

func (s *stackSink) run() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for !s.stop.Load() {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		matched := false
		for i, k := range s.kinds {
			if bytes.Equal(buf[:n], k) {
				s.counts[i].Add(1)
				matched = true
				break
			}
		}
		if !matched {
			s.others.Add(1)
		}
	}
}

func (s *stackSink) close() {
	if s.stop.Swap(true) {
		return
	}
	<-s.done
	unix.Close(s.fd)
}

// count is how many frames of kind i reached the stack so far.
func (s *stackSink) count(i int) int { return int(s.counts[i].Load()) }

// settle waits until at least want[i] frames of each kind i have reached
// the stack and then nothing more for 200 ms, and returns the counts.
func (s *stackSink) settle(t *testing.T, want ...int) []int {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	var last []int
	quiet := time.Now()
	for {
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		require.NoError(t, err, "the sink's socket")
		now := make([]int, len(s.kinds))
		reached := true
		for i := range s.kinds {
			now[i] = s.count(i)
			if i < len(want) && now[i] < want[i] {
				reached = false
			}
		}
		if !equalInts(now, last) {
			last, quiet = now, time.Now()
		}
		if reached && time.Since(quiet) >= 200*time.Millisecond {
			return now
		}
		require.True(t, time.Now().Before(deadline), "frames at the stack: %v, want at least %v", now, want)
		time.Sleep(10 * time.Millisecond)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// pacedKind is a frame a paced sender sends, perRound of it every round.
type pacedKind struct {
	frame    []byte
	perRound int
}

// sendPaced sends rounds of kinds through the veth's peer at perSecond
// rounds a second for d, in batches of what is due (every 2 ms at most),
// from one thread; it returns the frames sent of each kind and how long
// it sent, from the first frame to the last.
func sendPaced(t *testing.T, ns *testns.NS, kinds []pacedKind, perSecond int, d time.Duration) ([]int, time.Duration) {
	t.Helper()
	gen := txgen.NewPacket()
	defer gen.Close()
	sent := make([]int, len(kinds))
	var took time.Duration
	require.NoError(t, ns.Do(func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := time.Now()
		rounds := 0
		for {
			elapsed := time.Since(start)
			if elapsed >= d {
				took = elapsed
				return nil
			}
			due := int(float64(perSecond)*elapsed.Seconds()) - rounds
			if due <= 0 {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			for i, k := range kinds {
				if err := gen.Send(ns.PeerIdx, k.frame, due*k.perRound); err != nil {
					return err
				}
				sent[i] += due * k.perRound
			}
			rounds += due
		}
	}))
	return sent, took
}

// flowRule waits until the plugin reports the rule of text, with its
// counters at packets at least, and returns its point.
func flowRule(t *testing.T, ns *testns.NS, p *XDPDrop, text string, packets int) telegraf.Metric {
	t.Helper()
	rules, _ := waitFlow(t, ns, p, fmt.Sprintf("the rule %q at %d packets", text, packets), func(rules map[string]telegraf.Metric, _ telegraf.Metric) bool {
		m := rules[text]
		return m != nil && m.Fields()[FieldPackets].(uint64) >= uint64(packets)
	})
	return rules[text]
}

// waitUp waits until the plugin's session with its peer is established.
func waitUp(t *testing.T, ns *testns.NS, p *XDPDrop) {
	t.Helper()
	waitFlow(t, ns, p, "the session up", func(_ map[string]telegraf.Metric, peer telegraf.Metric) bool {
		return peer.Fields()[FieldUp] == true
	})
}

// TestFlowSpecRateLimit: gobgpd's `rate-limit R` (traffic-rate-bytes, the
// only rate gobgp's CLI sends) on DNS frames of 100 bytes offered at
// twice R for 10 s admits R × t plus its burst (a tenth of a second of R)
// within 10 % at the receiving stack, counting the whole frame as XDP
// sees it (the IP packet alone would admit 16 % more); the rule's point
// counts every frame it matched and, dropped, those that did not reach
// the stack, exactly; frames the rule does not match all pass.
func TestFlowSpecRateLimit(t *testing.T) {
	const (
		rate   = 500_000 // bytes a second
		size   = 100     // bytes a frame, Ethernet header included
		rounds = 1_000   // a second: 10 DNS frames and 1 other each
	)
	rs := startRouteServer(t)
	ns := testns.New(t)
	p := flowPlugin(t, ns, rs)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitUp(t, ns, p)
	rs.rib("add", strings.Fields(fmt.Sprintf("match destination 10.9.0.1/32 protocol udp destination-port ==53 then rate-limit %d", rate))...)
	waitInForce(t, p, 1)
	const text = "destination 10.9.0.1/32 protocol ==17 destination-port ==53 then rate-limit 500000 bytes"

	dns := udpFrame("203.0.113.5", "10.9.0.1", 40000, 53, size)
	other := udpFrame("203.0.113.5", "10.9.0.1", 40000, 54, size)
	require.Len(t, dns, size)
	sink := openSink(t, ns, dns, other)
	sent, took := sendPaced(t, ns, []pacedKind{{dns, 10}, {other, 1}}, rounds, 10*time.Second)
	got := sink.settle(t, 0, sent[1])
	m := flowRule(t, ns, p, text, sent[0])
	logLines(t, m)

	admitted := got[0]
	want := (rate*took.Seconds() + rate*0.1) / size
	t.Logf("offered %d frames of %d bytes in %v (%.0f B/s); %d reached the stack: want R × t + burst = %.0f (%+.2f %%)",
		sent[0], size, took.Round(time.Millisecond), float64(sent[0]*size)/took.Seconds(), admitted, want, 100*(float64(admitted)/want-1))
	require.GreaterOrEqual(t, float64(sent[0]), 1.8*want, "the rule's frames were offered at about twice its rate")
	require.InDelta(t, want, float64(admitted), 0.1*want, "admitted: R × t + burst within 10 %%")
	require.Equal(t, sent[1], got[1], "frames the rule does not match all passed")
	require.Equal(t, FlowActionLimit, m.Tags()[TagAction])
	require.Equal(t, map[string]any{
		FieldRuleText: text, FieldPackets: uint64(sent[0]), FieldBytes: uint64(sent[0] * size),
		FieldDroppedPackets: uint64(sent[0] - admitted), FieldDroppedBytes: uint64((sent[0] - admitted) * size),
	}, m.Fields())
}

// TestFlowSpecHandover: a reload under a stream of matching and
// non-matching frames. The stopping plugin hands its maps over (with the
// FlowSpec rule gobgpd announced), its successor takes them and starts its
// own session: no matching frame reaches the stack during the whole
// reload, every non-matching one does; the successor reports the rule
// with its counters going on from the predecessor's (every matching frame
// sent counted once); withdrawn at gobgpd once the successor's session is
// up, the rule stops matching within 1 s.
func TestFlowSpecHandover(t *testing.T) {
	rs := startRouteServer(t)
	ns := testns.New(t)
	// With GRO the veth takes frames in while it has no XDP program: an
	// unfiltered moment would show at the sink.
	require.NoError(t, ns.EnableGRO(testns.Dev))
	a := flowPlugin(t, ns, rs)
	a.HandoverTimeout = config.Duration(10 * time.Second)
	require.Empty(t, startPlugin(t, ns, a).Errors)
	waitUp(t, ns, a)
	rule := strings.Fields("match destination 10.9.0.1/32 protocol udp source-port ==123 packet-length >=400 then discard")
	rs.rib("add", rule...)
	waitInForce(t, a, 1)

	ntpBig := udpFrame("203.0.113.5", "10.9.0.1", 123, 40000, 468)
	ntpSmall := udpFrame("203.0.113.5", "10.9.0.1", 123, 40000, 90)
	sink := openSink(t, ns, ntpBig, ntpSmall)
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	var sentBig, sentSmall atomic.Int64
	s := txgen.NewStream(1, func() (int, error) {
		if err := ns.Do(func() error { return gen.Send(ns.PeerIdx, ntpBig, 32) }); err != nil {
			return 0, err
		}
		sentBig.Add(32)
		if err := ns.Do(func() error { return gen.Send(ns.PeerIdx, ntpSmall, 8) }); err != nil {
			return 32, err
		}
		sentSmall.Add(8)
		time.Sleep(2 * time.Millisecond) // at most 20,000 frames a second
		return 40, nil
	})
	defer s.Stop()
	require.NoError(t, s.WaitSent(4000, testns.Hang))
	before := flowRule(t, ns, a, ntpRuleText, 1).Fields()[FieldPackets].(uint64)

	dir := handOverInProcess(t, ns, a)
	b := flowConfig("127.0.0.1", rs.port)
	b.HandoverTimeout = config.Duration(10 * time.Second)
	require.NoError(t, b.Init())
	b.links.handoff.dir = dir
	acc := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, b, func() error { b.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	require.Len(t, b.flow.table.inForce(), 1, "the rule handed over is in force from the successor's start")
	waitUp(t, ns, b)
	gathered := &testutil.Accumulator{}
	inNS(t, ns, b, func() error { return b.Gather(gathered) })
	require.Empty(t, gathered.Errors, "the successor reads the counters of the program it took over")
	// The successor's receiver has the rule from gobgpd again (its text).
	flowRule(t, ns, b, ntpRuleText, int(before))
	require.NoError(t, s.WaitSent(s.Sent()+4000, testns.Hang))
	require.NoError(t, s.Stop())
	got := sink.settle(t, 0, int(sentSmall.Load()))
	t.Logf("across the reload: %d matching frames sent (%d counted before it), %d reached the stack; %d non-matching sent, %d reached it",
		sentBig.Load(), before, got[0], sentSmall.Load(), got[1])
	require.Zero(t, got[0], "matching frames that reached the stack")
	require.Equal(t, int(sentSmall.Load()), got[1], "non-matching frames that reached the stack")
	m := flowRule(t, ns, b, ntpRuleText, int(sentBig.Load()))
	logLines(t, m)
	require.Equal(t, map[string]any{
		FieldRuleText: ntpRuleText, FieldPackets: uint64(sentBig.Load()), FieldBytes: uint64(sentBig.Load() * 468),
		FieldDroppedPackets: uint64(sentBig.Load()), FieldDroppedBytes: uint64(sentBig.Load() * 468),
	}, m.Fields(), "the successor's point counts on from the predecessor's")

	withdrawn := time.Now()
	rs.rib("del", rule[:len(rule)-2]...)
	waitInForce(t, b, 0)
	lifted := time.Since(withdrawn)
	t.Logf("withdrawn at gobgpd to lifted at the successor: %v", lifted.Round(time.Millisecond))
	require.LessOrEqual(t, lifted, time.Second, "the withdrawal lifted within 1 s")
	sendFlowFrames(t, ns, flowFrames{ntpBig, 17, 17})
}

// startExaBGP runs Debian's exabgp (AS 65000) on a loopback port of its
// own, waiting for the plugin (AS 65001, from 127.0.0.1) to connect, with
// the flow routes of routes; it returns its address and port, and fails
// the test at once when exabgp exits.
func startExaBGP(t *testing.T, routes string) (string, uint16) {
	t.Helper()
	if _, err := exec.LookPath("exabgp"); err != nil {
		if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
			t.Fatal("exabgp not installed (apt-get install exabgp)")
		}
		t.Skip("exabgp not installed (apt-get install exabgp)")
	}
	const addr = "127.0.0.4"
	port := loopbackPort(t)
	conf := filepath.Join(t.TempDir(), "exabgp.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`neighbor 127.0.0.1 {
  router-id %[1]s;
  local-address %[1]s;
  local-as 65000;
  peer-as 65001;
  passive true;
  listen %[2]d;
  family { ipv4 flow; ipv6 flow; }
  flow {
%[3]s
  }
}
`, addr, port, routes)), 0o600))
	out := &lockedBuffer{}
	cmd := testproc.Command("env", "exabgp.tcp.bind="+addr, fmt.Sprintf("exabgp.tcp.port=%d", port),
		"exabgp.daemon.user=root", "exabgp.daemon.drop=false", "exabgp.api.cli=false", "exabgp.log.destination=stdout",
		"exabgp", conf)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), "start exabgp")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	// Listening, or gone.
	deadline := time.Now().Add(testns.Hang)
	for {
		select {
		case <-exited:
			t.Fatalf("exabgp exited at start:\n%s", out.String())
		default:
		}
		if c, err := (&net.Dialer{Timeout: time.Second}).Dial("tcp", net.JoinHostPort(addr, fmt.Sprint(port))); err == nil {
			c.Close()
			return addr, port
		}
		require.True(t, time.Now().Before(deadline), "exabgp did not listen on %s port %d:\n%s", addr, port, out.String())
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer is a bytes.Buffer a daemon's output goes to while the test
// may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFlowSpecExaBGP: the NTP rule announced by ExaBGP, the second
// implementation, drops exactly the 468-byte NTP frames of the mix at the
// receiving stack and passes the rest; its point, the same text as
// gobgpd's rule, counts them.
func TestFlowSpecExaBGP(t *testing.T) {
	addr, port := startExaBGP(t, `    route ntp {
      match {
        destination 10.9.0.1/32;
        protocol udp;
        source-port =123;
        packet-length >=400;
      }
      then { discard; }
    }`)
	ns := testns.New(t)
	hostAddr(t, ns)
	p := flowConfig(addr, port)
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitUp(t, ns, p)
	waitInForce(t, p, 1)
	sendFlowFrames(t, ns, flowMix("203.0.113.5", 0)...)
	rules, peer := flowGather(t, ns, p)
	logLines(t, rules[ntpRuleText], peer)
	require.Len(t, rules, 1)
	require.NotNil(t, rules[ntpRuleText], "the rule's point by its text: %v", rules)
	require.Equal(t, map[string]any{
		FieldRuleText: ntpRuleText, FieldPackets: uint64(37), FieldBytes: uint64(37 * 468),
		FieldDroppedPackets: uint64(37), FieldDroppedBytes: uint64(37 * 468),
	}, rules[ntpRuleText].Fields())
	require.Equal(t, int64(1), peer.Fields()[FieldAccepted])
	require.Equal(t, addr, peer.Tags()[TagPeer])
}

// TestFlowSpecAllowListed: an allow-listed source passes whatever FlowSpec
// says: the NTP rule's frames from it all reach the stack, and the rule
// never sees them; another source's are dropped and counted. The
// allow-list is [bans]'s, with a feed (a LAPI with no decision) or, with
// [flowspec], alone.
func TestFlowSpecAllowListed(t *testing.T) {
	for _, feed := range []bool{false, true} {
		t.Run(map[bool]string{false: "allow_prefix alone", true: "with a feed"}[feed], func(t *testing.T) {
			rs := startRouteServer(t)
			ns := testns.New(t)
			p := flowPlugin(t, ns, rs)
			p.Bans = &BansConfig{AllowPrefix: []string{"192.0.2.0/24"}}
			if feed {
				l := lapi.Start(t)
				p.Bans.CrowdSec = &CrowdSecConfig{URL: l.URL(), APIKey: l.AddBouncer("xdp-drop-test"), Interval: config.Duration(testBanInterval)}
			}
			require.Empty(t, startPlugin(t, ns, p).Errors)
			waitUp(t, ns, p)
			rs.rib("add", strings.Fields("match destination 10.9.0.1/32 protocol udp source-port ==123 packet-length >=400 then discard")...)
			waitInForce(t, p, 1)
			sendFlowFrames(t, ns,
				flowFrames{udpFrame("192.0.2.7", "10.9.0.1", 123, 40000, 468), 29, 29},
				flowFrames{udpFrame("203.0.113.5", "10.9.0.1", 123, 40000, 468), 31, 0},
				flowFrames{udpFrame("192.0.2.7", "10.9.0.1", 123, 40000, 90), 7, 7},
			)
			rules, _ := flowGather(t, ns, p)
			logLines(t, rules[ntpRuleText])
			require.Equal(t, map[string]any{
				FieldRuleText: ntpRuleText, FieldPackets: uint64(31), FieldBytes: uint64(31 * 468),
				FieldDroppedPackets: uint64(31), FieldDroppedBytes: uint64(31 * 468),
			}, rules[ntpRuleText].Fields(), "the rule counts the other source's frames alone")
		})
	}
}

// TestFlowSpecDryRun: with dry_run the rule's frames all pass; xdp_drop
// counts them would_drop, and the rule's point dropped_packets and
// dropped_bytes (what it would have dropped), as docs/flowspec.md says.
func TestFlowSpecDryRun(t *testing.T) {
	rs := startRouteServer(t)
	ns := testns.New(t)
	p := flowPlugin(t, ns, rs)
	p.DryRun = true
	require.Empty(t, startPlugin(t, ns, p).Errors)
	waitUp(t, ns, p)
	rs.rib("add", strings.Fields("match destination 10.9.0.1/32 protocol udp source-port ==123 packet-length >=400 then discard")...)
	waitInForce(t, p, 1)
	sendFlowFrames(t, ns, flowMix("203.0.113.5", 37)...)

	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	var rule telegraf.Metric
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == MeasurementFlowSpec {
			rule = m
		}
	}
	require.NotNil(t, rule, "the rule's point")
	logLines(t, rule)
	require.Equal(t, FlowActionDrop, rule.Tags()[TagAction])
	require.Equal(t, map[string]any{
		FieldRuleText: ntpRuleText, FieldPackets: uint64(37), FieldBytes: uint64(37 * 468),
		FieldDroppedPackets: uint64(37), FieldDroppedBytes: uint64(37 * 468),
	}, rule.Fields())
	got := ifacePackets(acc, testns.Dev)
	require.Equal(t, uint64(37), got["ipv4/udp/"+ActionWouldDrop], "the rule's frames counted would_drop: %v", got)
	require.Equal(t, uint64(23+11), got["ipv4/udp/"+ActionPass], "%v", got)
	require.Equal(t, uint64(13), got["ipv4/tcp/"+ActionPass], "%v", got)
	require.Zero(t, got["ipv4/udp/"+ActionDrop], "%v", got)
}
