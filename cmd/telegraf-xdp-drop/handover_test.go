//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

var (
	udpFrame = frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	tcpFrame = frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(6)))
)

// stream sends UDP from the peer without pause until stopped, counting
// the frames sent.
type stream struct {
	*txgen.Stream
	begin time.Time
}

func startStream(t *testing.T, ns *testns.NS, gen *txgen.Generator) *stream {
	return &stream{begin: time.Now(), Stream: txgen.NewStream(senders, func() (int, error) {
		if err := ns.Do(func() error { return gen.Send(ns.PeerIdx, udpFrame, perCall) }); err != nil {
			return 0, err
		}
		return perCall, nil
	})}
}

// Each live-frames send waits for an RCU grace period, in which it sends
// nothing: several senders in parallel leave no moment without traffic.
const (
	senders = 4
	perCall = 1024
)

func (s *stream) finish(t *testing.T) (int64, time.Duration) {
	t.Helper()
	require.NoError(t, s.Stop())
	return s.Sent(), time.Since(s.begin)
}

// gapWatch polls the interface's XDP program id until stopped and counts
// the polls that found none: the unfiltered window, as far as polling
// every millisecond can see it.
type gapWatch struct {
	polls, empty atomic.Int64
	stop         chan struct{}
	done         chan error
}

func watchGaps(ns *testns.NS) *gapWatch {
	g := &gapWatch{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		g.done <- ns.Do(func() error {
			for {
				select {
				case <-g.stop:
					return nil
				default:
				}
				l, err := netlink.LinkByName(testns.Dev)
				if err != nil {
					return err
				}
				g.polls.Add(1)
				if x := l.Attrs().Xdp; x == nil || !x.Attached {
					g.empty.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}()
	return g
}

func (g *gapWatch) finish(t *testing.T) (polls, empty int64) {
	t.Helper()
	close(g.stop)
	require.NoError(t, <-g.done)
	return g.polls.Load(), g.empty.Load()
}

// settledRx returns the frames the interface has taken in, once no more
// are arriving.
func settledRx(t *testing.T, ns *testns.NS) uint64 {
	t.Helper()
	last := ^uint64(0)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n, err := ns.RxPackets(testns.Dev)
		require.NoError(t, err)
		if n == last {
			return n
		}
		last = n
	}
	t.Fatal("frames still arriving after 5s")
	return 0
}

// countIPv4 counts the frames of an IP protocol among those the sink saw.
func countIPv4(got [][]byte, proto byte) int {
	n := 0
	for _, f := range got {
		if len(f) > 23 && f[12] == 0x08 && f[13] == 0x00 && f[23] == proto {
			n++
		}
	}
	return n
}

// linkState returns the attached field and program id of the last gather's
// xdp_drop_link point, and the packets counted for (family, proto, action).
func gatherState(t *testing.T, p *proc, protocol, action string) (attached bool, id int64, packets int64) {
	t.Helper()
	ms := p.gather(t, testns.Dev)
	c, _ := counts(ms)
	link := ms[len(ms)-1]
	a, _ := link.GetField("attached")
	if v, ok := link.GetField("program_id"); ok {
		id = v.(int64)
	}
	return a.(bool), id, c[key{testns.Dev, "ipv4", protocol, action}][0]
}

var holderPID = regexp.MustCompile(`held for handover, program id \d+ \(process (\d+);`)

// holderOf returns the pid of the handover process a stopped instance logged.
func holderOf(t *testing.T, p *proc) int {
	t.Helper()
	m := holderPID.FindStringSubmatch(p.stderr.String())
	require.NotNil(t, m, "no handover logged; stderr: %s", p.stderr)
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return pid
}

// waitGone waits until process pid has exited (and been reaped, or is a
// zombie), for at most d.
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("handover process %d still runs after %v", pid, d)
}

// TestHandoverUnderLoad stops instance A as inputs.execd does on a reload
// (stdin closed) and starts B at once, while the peer sends UDP that both
// drop without pause: no UDP frame may reach the sink's stack. With the
// same policy B continues A's counters exactly; with another, B's policy
// holds from the swap and its counters restart, logged.
func TestHandoverUnderLoad(t *testing.T) {
	cases := []struct {
		name    string
		dropB   string
		changed bool
	}{
		{"same policy", `["udp"]`, false},
		{"drop changed", `["udp", "tcp"]`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := testns.New(t)
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
			// With GRO the veth takes frames in while it has no XDP
			// program: an unfiltered moment would show at the sink.
			require.NoError(t, ns.EnableGRO(testns.Dev))
			gen, err := txgen.New()
			require.NoError(t, err)
			defer gen.Close()
			sink, err := ns.OpenPacketSocket(testns.Dev)
			require.NoError(t, err)
			defer sink.Close()
			send := func(frame []byte, n int) {
				require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) }))
			}

			a := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n", testns.Dev))
			idA := waitAttached(t, ns, testns.Dev)
			rx0 := settledRx(t, ns)
			// The sink sees what passes: A passes TCP.
			send(tcpFrame, 10)

			gaps := watchGaps(ns)
			s := startStream(t, ns, gen)
			require.NoError(t, s.WaitSent(20000, testns.Hang))
			require.NoError(t, a.stdin.Close())
			b := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = %s\n", testns.Dev, c.dropB))
			var attached bool
			var idB int64
			for deadline := time.Now().Add(testns.Hang); !attached && time.Now().Before(deadline); {
				attached, idB, _ = gatherState(t, b, "udp", "drop")
				if !attached {
					time.Sleep(20 * time.Millisecond)
				}
			}
			require.True(t, attached, "B never took over; B's stderr: %s", b.stderr)
			require.NoError(t, s.WaitSent(s.Sent()+20000, testns.Hang))
			sent, took := s.finish(t)
			polls, empty := gaps.finish(t)
			// Not every frame sent reaches the interface (the veth's ring
			// overflows): its own count says how many did.
			delivered := int64(settledRx(t, ns)-rx0) - 10
			rate := float64(delivered) / took.Seconds()
			require.NoError(t, a.wait(t), "A's exit status; stderr: %s", a.stderr)
			// B's policy from the swap: TCP passes, or is dropped when B drops it.
			send(tcpFrame, 100)

			var udp, tcp int64
			for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, _, udp = gatherState(t, b, "udp", "drop"); udp >= delivered || c.changed {
					break
				}
			}
			_, _, tcp = gatherState(t, b, "tcp", "drop")
			// The TCP that passes: 10 under A, and 100 under B unless B drops it.
			passedTCP := 110
			if c.changed {
				passedTCP = 10
			}
			got, err := sink.Receive(passedTCP, testns.Hang)
			require.NoError(t, err)
			leaked := countIPv4(got, frames.ProtoUDP)
			t.Logf("%d UDP frames sent, %d reached the interface (%.0f frames/s); %d reached the sink; %d of %d polls found no XDP program; A id %d, B id %d",
				sent, delivered, rate, leaked, empty, polls, idA, idB)

			require.Zero(t, leaked, "UDP frames that reached the sink's stack")
			require.Zero(t, empty, "polls that found the interface without XDP")
			require.Contains(t, a.stderr.String(), fmt.Sprintf("I! interface %q: held for handover, program id %d", testns.Dev, idA))
			waitGone(t, holderOf(t, a), testns.Hang)
			if !c.changed {
				require.Equal(t, int64(idA), idB, "same program kept")
				require.Equal(t, delivered, udp, "B continues A's counters exactly")
				require.Equal(t, 110, countIPv4(got, frames.ProtoTCP), "TCP passes under A and B")
				waitLog(t, b, fmt.Sprintf("I! interface %q: taken over in place, program id %d; counters continue", testns.Dev, idA))
				return
			}
			require.NotEqual(t, int64(idA), idB, "B's program replaced A's")
			require.Positive(t, udp)
			require.Less(t, udp, delivered, "counters restarted at the swap")
			require.Equal(t, int64(100), tcp, "B drops TCP from the swap")
			require.Equal(t, 10, countIPv4(got, frames.ProtoTCP), "only the TCP sent under A passed")
			waitLog(t, b, fmt.Sprintf("I! interface %q: taken over in place, program id %d (was %d); counters restart from zero: the drop policy, the rules or the program version changed", testns.Dev, idB, idA))
		})
	}
}

// TestHandoverWithoutSuccessor: a stopped instance's interface stays
// filtered until handover_timeout, then is released and the handover
// process is gone; a SIGTERM to that process releases at once.
func TestHandoverWithoutSuccessor(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		ns := testns.New(t)
		conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
		p := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"2s\"\n", testns.Dev))
		id := waitAttached(t, ns, testns.Dev)
		p.gather(t, testns.Dev)
		stopped := time.Now()
		require.NoError(t, p.stdin.Close())
		require.NoError(t, p.wait(t), "exit status; stderr: %s", p.stderr)
		pid := holderOf(t, p)
		require.Contains(t, p.stderr.String(), fmt.Sprintf("held for handover, program id %d (process %d; released after 2s if no successor takes it over)", id, pid))
		now, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, id, now, "held after the exit")
		// Released by the timeout.
		_, err = ns.WaitNoXDP(testns.Dev, testns.Hang)
		require.NoError(t, err)
		t.Logf("released %v after the stop", time.Since(stopped))
		waitGone(t, pid, testns.Hang)
	})
	t.Run("SIGTERM to the handover process", func(t *testing.T) {
		ns := testns.New(t)
		conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
		p := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))
		waitAttached(t, ns, testns.Dev)
		p.gather(t, testns.Dev)
		require.NoError(t, p.stdin.Close())
		require.NoError(t, p.wait(t), "exit status; stderr: %s", p.stderr)
		pid := holderOf(t, p)
		require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
		_, err := ns.WaitNoXDP(testns.Dev, testns.Hang)
		require.NoError(t, err, "released at once")
		waitGone(t, pid, testns.Hang)
	})
}

// TestHandoverSIGTERM: SIGTERM and SIGINT stop gracefully, with a handover,
// like a closed stdin.
func TestHandoverSIGTERM(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ns := testns.New(t)
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
			p := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n", testns.Dev))
			id := waitAttached(t, ns, testns.Dev)
			p.gather(t, testns.Dev)
			require.NoError(t, p.cmd.Process.Signal(sig))
			require.NoError(t, p.wait(t), "exit status; stderr: %s", p.stderr)
			pid := holderOf(t, p)
			now, err := ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			require.Equal(t, id, now, "held after the exit")
			q := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev))
			attached, got, _ := gatherState(t, q, "udp", "drop")
			require.True(t, attached, "stderr: %s", q.stderr)
			require.Equal(t, int64(id), got, "taken over in place")
			waitGone(t, pid, testns.Hang)
			// The successor's own stop, with handover_timeout = "0s", detaches.
			require.NoError(t, q.stdin.Close())
			_, err = ns.WaitNoXDP(testns.Dev, testns.Hang)
			require.NoError(t, err)
			require.NoError(t, q.wait(t))
			require.NotContains(t, q.stderr.String(), "held for handover")
		})
	}
}

// TestHandoverUnmanagedReleased: an interface the successor does not
// manage is released at once when it takes over another.
func TestHandoverUnmanagedReleased(t *testing.T) {
	ns := testns.New(t)
	conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	a := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q, \"xdpt2\"]\n  drop = [\"all\"]\n", testns.Dev))
	waitAttached(t, ns, testns.Dev)
	waitAttached(t, ns, "xdpt2")
	a.gather(t, "xdpt2")
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t), "stderr: %s", a.stderr)
	pid := holderOf(t, a)
	b := startAt(t, ns, conf, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", testns.Dev))
	attached, _, _ := gatherState(t, b, "udp", "drop")
	require.True(t, attached)
	_, err = ns.WaitNoXDP("xdpt2", testns.Hang)
	require.NoError(t, err, "the interface B does not manage is released at once")
	waitLog(t, b, `I! interface "xdpt2": released at once by the stopped instance's handover: this instance does not manage it`)
	waitGone(t, pid, testns.Hang)
}

// TestHandoverWithPins: a successor with pin_path pins the counters it
// continues and, with keep_attached, the link it took over; a stop with
// keep_attached starts no handover process (the pinned link outlives the
// binary), and the next run continues the pinned counters. The binary runs
// in this process's mount namespace, where the pins are, and reaches the
// interface through the namespace option: handover keys name the
// interface's namespace, not the binary's.
func TestHandoverWithPins(t *testing.T) {
	ns := testns.New(t)
	conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
	pins := filepath.Join(testns.BPFFS(t, 0o700), "xdp_drop")
	base := fmt.Sprintf("[[inputs.xdp_drop]]\n  namespace = %q\n  interfaces = [%q]\n  drop = [\"udp\"]\n", ns.Name, testns.Dev)
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, udpFrame, 100) }))
	udpAfter := func(p *proc, want int64) {
		t.Helper()
		var got int64
		for deadline := time.Now().Add(testns.Hang); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, _, got = gatherState(t, p, "udp", "drop"); got == want {
				return
			}
		}
		t.Fatalf("udp drops %d, want %d; stderr: %s", got, want, p.stderr)
	}

	a := startHereAt(t, ns, conf, base)
	id := waitAttached(t, ns, testns.Dev)
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, udpFrame, 100) }))
	udpAfter(a, 100)
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t))

	b := startHereAt(t, ns, conf, base+fmt.Sprintf("  pin_path = %q\n  keep_attached = true\n", pins))
	udpAfter(b, 100)
	waitLog(t, b, fmt.Sprintf("taken over in place, program id %d; counters continue", id))
	counters, err := filepath.Glob(filepath.Join(pins, testns.Dev, "counters_*"))
	require.NoError(t, err)
	require.Len(t, counters, 1, "the continued counters are pinned; stderr: %s", b.stderr)
	require.FileExists(t, filepath.Join(pins, testns.Dev, "link"), "keep_attached pinned the link taken over")
	require.NoError(t, b.stdin.Close())
	require.NoError(t, b.wait(t))
	require.NotContains(t, b.stderr.String(), "held for handover", "keep_attached needs no handover process")
	require.Contains(t, b.stderr.String(), "left attached (keep_attached)")
	now, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, now, "kept attached by its pin")

	c := startHereAt(t, ns, conf, base+fmt.Sprintf("  pin_path = %q\n  handover_timeout = \"0s\"\n", pins))
	udpAfter(c, 100)
	waitLog(t, c, "continuing pinned counters")
	require.NoError(t, c.stdin.Close())
	_, err = ns.WaitNoXDP(testns.Dev, testns.Hang)
	require.NoError(t, err)
	require.NoError(t, c.wait(t))
}

// TestHandoverJumbo: at MTU 9000 the attachment runs the multi-buffer
// program; a successor with the same policy keeps it, one with another
// policy puts its own multi-buffer program on the same link (the device
// refuses the single-buffer one), never leaving the interface bare.
func TestHandoverJumbo(t *testing.T) {
	ns := testns.New(t)
	conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
	for _, dev := range []string{testns.Dev, testns.Peer} {
		require.NoError(t, ns.SetMTU(dev, 9000))
	}
	jumbo := func(drop, timeout string) string {
		return fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = %s\n  handover_timeout = %q\n", testns.Dev, drop, timeout)
	}
	a := startAt(t, ns, conf, jumbo(`["udp"]`, "10s"))
	idA := waitAttached(t, ns, testns.Dev)
	waitLog(t, a, "multi-buffer: the device's MTU needs more than one buffer per frame")
	gaps := watchGaps(ns)
	require.NoError(t, a.stdin.Close())
	require.NoError(t, a.wait(t))

	b := startAt(t, ns, conf, jumbo(`["udp"]`, "10s"))
	attached, idB, _ := gatherState(t, b, "udp", "drop")
	require.True(t, attached, "stderr: %s", b.stderr)
	require.Equal(t, int64(idA), idB, "the multi-buffer program is kept")
	waitLog(t, b, "counters continue")
	require.NoError(t, b.stdin.Close())
	require.NoError(t, b.wait(t))

	c := startAt(t, ns, conf, jumbo(`["udp", "tcp"]`, "0s"))
	attached, idC, _ := gatherState(t, c, "udp", "drop")
	require.True(t, attached, "stderr: %s", c.stderr)
	require.NotEqual(t, idB, idC)
	waitLog(t, c, fmt.Sprintf("taken over in place, program id %d (was %d)", idC, idB))
	polls, empty := gaps.finish(t)
	require.Zero(t, empty, "polls of %d that found no XDP program", polls)
	require.NoError(t, c.stdin.Close())
	_, err := ns.WaitNoXDP(testns.Dev, testns.Hang)
	require.NoError(t, err)
	require.NoError(t, c.wait(t))
}

// ruleCount is the packets field of rule's xdp_drop_rule point, -1 when absent.
func ruleCount(ms []telegraf.Metric, rule string) int64 {
	for _, m := range ms {
		if r, _ := m.GetTag("rule"); m.Name() == "xdp_drop_rule" && r == rule {
			v, _ := m.GetField("packets")
			return v.(int64)
		}
	}
	return -1
}

// TestHandoverRules: a successor with the same rules keeps the program and
// continues its rule counters; one with changed rules, or with rules where
// there were none or none where there were (a program compiled apart),
// swaps the program in place, and its rules hold from the swap with
// counters from zero.
func TestHandoverRules(t *testing.T) {
	dns := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 53)))
	// config passes UDP to port (none: 0) from the frames' source by a
	// rule and drops other UDP. The source is an exact prefix: the program
	// that decides after the handover finds it in the hash table laid out
	// under its own key.
	config := func(port int) string {
		c := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n", testns.Dev)
		if port != 0 {
			c += fmt.Sprintf("  [[inputs.xdp_drop.rule]]\n    name = \"dns\"\n    action = \"pass\"\n    protocol = [\"udp\"]\n    dst_port = [%d]\n"+
				"    src_prefix = [\"192.0.2.1/32\", \"198.51.100.0/24\"]\n", port)
		}
		return c
	}
	for _, c := range []struct {
		name         string
		portA, portB int
		changed      bool
		// B's counts after A's 10 DNS and 10 other UDP frames, and 5
		// DNS frames under B.
		wantRule, wantDrop int64
	}{
		{"same rules", 53, 53, false, 15, 10},
		{"rule changed", 53, 54, true, 0, 5},
		{"rules added", 0, 53, true, 5, 0},
		{"rules removed", 53, 0, true, 0, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := testns.New(t)
			conf := filepath.Join(t.TempDir(), "xdp_drop.conf") // a successor runs its predecessor's file
			gen, err := txgen.New()
			require.NoError(t, err)
			defer gen.Close()
			send := func(frame []byte, n int) {
				require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) }))
			}
			a := startAt(t, ns, conf, config(c.portA))
			idA := waitAttached(t, ns, testns.Dev)
			send(dns, 10)
			send(udpFrame, 10)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				ms := a.gather(t, testns.Dev)
				cs, _ := counts(ms)
				if max(ruleCount(ms, "dns"), 0)+cs[key{testns.Dev, "ipv4", "udp", "drop"}][0] >= 20 {
					break
				}
				require.True(t, time.Now().Before(deadline), "A never counted the frames")
			}

			require.NoError(t, a.stdin.Close())
			b := startAt(t, ns, conf, config(c.portB))
			var attached bool
			var idB int64
			for deadline := time.Now().Add(10 * time.Second); !attached && time.Now().Before(deadline); {
				if attached, idB, _ = gatherState(t, b, "udp", "drop"); !attached {
					time.Sleep(20 * time.Millisecond)
				}
			}
			require.True(t, attached, "B never took over; B's stderr: %s", b.stderr)
			require.NoError(t, a.wait(t), "A's exit status; stderr: %s", a.stderr)
			send(dns, 5)

			wantRule, wantDrop := c.wantRule, c.wantDrop
			var ms []telegraf.Metric
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				ms = b.gather(t, testns.Dev)
				if cs, _ := counts(ms); max(ruleCount(ms, "dns"), 0)+cs[key{testns.Dev, "ipv4", "udp", "drop"}][0] >= wantRule+wantDrop {
					break
				}
			}
			cs, _ := counts(ms)
			if c.portB == 0 {
				require.Equal(t, int64(-1), ruleCount(ms, "dns"), "B has no rules: no rule points")
			} else {
				require.Equal(t, wantRule, ruleCount(ms, "dns"), "packets of rule dns under B")
			}
			require.Equal(t, wantDrop, cs[key{testns.Dev, "ipv4", "udp", "drop"}][0], "UDP dropped under B")
			// The frames the rule passed against the drop list are counted
			// apart from the class's own action, and continue with it.
			require.Equal(t, wantRule, cs[key{testns.Dev, "ipv4", "udp", "pass"}][0], "UDP passed by the rule under B")
			require.Equal(t, !c.changed, int64(idA) == idB, "same program kept only with the same rules")
			if c.changed {
				waitLog(t, b, fmt.Sprintf("I! interface %q: taken over in place, program id %d (was %d); counters restart from zero: the drop policy, the rules or the program version changed", testns.Dev, idB, idA))
			}
			// The rule maps are handed over once, and adopted only for the same rules.
			switch {
			case c.portA == 0:
			case c.portB == 0:
				waitLog(t, b, "I! handover: not taken over the stopped instance's rule maps: this instance has no rules")
			case c.changed:
				waitLog(t, b, "I! handover: not taken over the stopped instance's rule maps: the rules or the program version changed: this instance loads its own")
			default:
				waitLog(t, b, "I! handover: taken over the stopped instance's rule maps: every interface's program shares them")
			}
		})
	}
}
