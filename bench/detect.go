//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	tconfig "github.com/influxdata/telegraf/config"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/detect"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// The detect section: [bans.detect] pps = detectPPS, for = detectFor,
// sample_rate = 100; one source at 10× the rate per run, background
// sources at half of it throughout.
const (
	detectPPS         = 5000
	detectFor         = 2 * time.Second
	detectSampleRate  = 100
	detectRuns        = 5
	detectBackground  = 4
	detectStep        = 10 * time.Millisecond // the senders' pacing
	targetDetectNs    = 500.0                 // per sample: 5 % of a core at 100,000 samples/s
	detectMoreFlood   = 300 * time.Millisecond
	detectGiveUpAfter = detectFor + 5*time.Second
)

// targetTimeToBan is the target: dropped within for + 1 s.
const targetTimeToBan = detectFor + time.Second

// detectRun is one source's flood, from its first frame until its frames
// no longer reach the stack.
type detectRun struct {
	source        netip.Addr
	took          time.Duration // the first frame dropped − the first frame sent; 0: never banned
	rate          float64       // frames/s the source reached until its first frame dropped
	sent, passed  uint64        // the source's frames, sent and seen at the stack
	dropped       uint64        // the detection's ban counter over the run
	banned        bool
	phase         time.Duration // the flood's start into a second counted from the plugin's start
	backgroundPPS float64       // each background source's rate reached
}

type detectResult struct {
	pps        int
	runs       []detectRun
	background int
	bgSent     uint64 // every background frame sent, all runs
	bgPassed   uint64 // of them seen at the stack
	bgBanned   int    // background sources banned (events)
	active     int64  // detection bans in force at the end
	nsPerAdd   float64
	addAllocs  float64
	sender     string        // the transport that sent the frames
	step       time.Duration // the senders' pacing
}

// detectTimeToBan runs the plugin with [bans.detect] (enforcing) on the
// namespace's veth and floods it from one new source per run, the
// background sources sending all the while; each source's frames are
// counted at the stack by a packet socket on the veth.
func detectTimeToBan(e *env, runs int) (detectResult, error) {
	r := detectResult{pps: detectPPS, background: detectBackground}
	no := false
	x := xdp_drop.New()
	x.Interfaces, x.Drop, x.Log, x.HandoverTimeout = []string{testns.Dev}, []any{"gre"}, quietLogger{}, 0
	x.SampleRate, x.SampleActions = detectSampleRate, []string{xdp_drop.ActionDrop, xdp_drop.ActionPass}
	x.Bans = &xdp_drop.BansConfig{Detect: &xdp_drop.DetectConfig{PPS: detectPPS, For: tconfig.Duration(detectFor), DryRun: &no, UnverifiedAction: "drop"}}
	if err := x.Init(); err != nil {
		return r, err
	}
	gen, err := e.newSender()
	if err != nil {
		return r, err
	}
	defer gen.Close()
	r.sender, r.step = gen.String(), detectStep
	sock, err := openSourceCounter(e.ns, testns.Dev)
	if err != nil {
		return r, err
	}
	defer sock.Close()

	acc := &discardAccumulator{}
	var started time.Time
	err = e.ns.Do(func() error {
		if err := e.ns.CheckAttachable(testns.Dev); err != nil {
			return err
		}
		started = time.Now()
		return x.Start(acc)
	})
	if err != nil {
		return r, err
	}
	defer e.ns.Do(func() error { x.Stop(); return nil })
	if err := acc.err(); err != nil {
		return r, err
	}
	var events []xdp_drop.BanEvent
	snapshot := func() (dropped uint64, active int64) {
		_ = e.ns.Do(func() error {
			s := x.Snapshot(acc)
			events = append(events, s.Events...)
			for _, b := range s.Bans {
				if b.Origin == xdp_drop.OriginDetect {
					dropped, active = b.Packets, b.Active
				}
			}
			return nil
		})
		return dropped, active
	}

	var bg []netip.Addr
	for i := range detectBackground {
		bg = append(bg, netip.AddrFrom4([4]byte{10, 88, byte(i), 1}))
	}
	dst := netip.MustParseAddr("10.9.0.1")
	for i := range runs {
		src := netip.AddrFrom4([4]byte{10, 77, byte(i), 7})
		// Each run starts at another point of the detector's second.
		phase := time.Duration(float64(time.Second) * (float64(i) + 0.5) / float64(runs))
		at := started.Add(phase)
		for time.Until(at) < 300*time.Millisecond {
			at = at.Add(time.Second)
		}
		time.Sleep(time.Until(at))
		run, bs, bp, err := floodUntilBanned(e, gen, r.step, sock, snapshot, src, bg, dst)
		if err != nil {
			return r, fmt.Errorf("run %d, source %s: %w", i+1, src, err)
		}
		run.phase = phase
		r.runs = append(r.runs, run)
		r.bgSent += bs
		r.bgPassed += bp
	}
	_, r.active = snapshot()
	for _, ev := range events {
		if ev.Event != xdp_drop.EventBan {
			continue
		}
		for _, b := range bg {
			if p, err := netip.ParsePrefix(ev.Source); err == nil && p.Contains(b) {
				r.bgBanned++
			}
		}
	}
	if r.nsPerAdd, r.addAllocs, err = detectorCost(); err != nil {
		return r, err
	}
	return r, nil
}

// floodUntilBanned sends src at 10× pps and each of bg at half of it, in
// steps of step, until the detection's ban counter moves and
// detectMoreFlood more; the first frame dropped is the first the stack did
// not see, and the time to ban runs from the first frame to its step.
func floodUntilBanned(e *env, gen *sender, stepLen time.Duration, sock *sourceCounter, snapshot func() (uint64, int64), src netip.Addr, bg []netip.Addr, dst netip.Addr) (detectRun, uint64, uint64, error) {
	run := detectRun{source: src}
	heavy := udpFrom(src, dst)
	perStep := uint32(10 * detectPPS * stepLen / time.Second)
	bgPerStep := uint32(detectPPS / 2 * stepLen / time.Second)
	var bgFrames [][]byte
	for _, b := range bg {
		bgFrames = append(bgFrames, udpFrom(b, dst))
	}
	passed0 := sock.count(src)
	var bgPassed0 uint64
	for _, b := range bg {
		bgPassed0 += sock.count(b)
	}
	dropped0, _ := snapshot()
	type step struct {
		at   time.Time
		from uint64 // the source's frames sent before this step
	}
	var steps []step
	var bgSent uint64
	start := time.Now()
	var bannedAt time.Time
	next := start
	for n := 0; ; n++ {
		if bannedAt.IsZero() && time.Since(start) > detectGiveUpAfter {
			break
		}
		if !bannedAt.IsZero() && time.Since(bannedAt) > detectMoreFlood {
			break
		}
		steps = append(steps, step{time.Now(), run.sent})
		if err := e.sendStep(gen, heavy, perStep, bgFrames, bgPerStep); err != nil {
			return run, 0, 0, err
		}
		run.sent += uint64(perStep)
		bgSent += uint64(bgPerStep) * uint64(len(bg))
		if bannedAt.IsZero() && n%5 == 4 {
			if d, _ := snapshot(); d > dropped0 {
				bannedAt = time.Now()
			}
		}
		next = next.Add(stepLen)
		time.Sleep(time.Until(next))
	}
	end := time.Now()
	// The stack has seen all it will once the counts stop moving and the
	// source's frames are all accounted for (a loaded machine may hold
	// the socket's reader back a while).
	for deadline := time.Now().Add(3 * time.Second); ; {
		sock.settle()
		dropped1, _ := snapshot()
		run.passed = sock.count(src) - passed0
		run.dropped = dropped1 - dropped0
		if run.passed+run.dropped == run.sent || time.Now().After(deadline) {
			break
		}
	}
	var bgPassed uint64
	for _, b := range bg {
		bgPassed += sock.count(b)
	}
	bgPassed -= bgPassed0
	run.backgroundPPS = float64(bgSent) / float64(len(bg)) / end.Sub(start).Seconds()
	if run.passed+run.dropped != run.sent {
		lost := "veth counters unread"
		if st, err := e.ns.Stats(testns.Dev); err == nil {
			lost = fmt.Sprintf("the veth's rx_dropped %d, rx_packets %d", st.RxDropped, st.RxPackets)
		}
		return run, 0, 0, fmt.Errorf("sent %d frames, %d reached the stack and the ban counter dropped %d (%s)", run.sent, run.passed, run.dropped, lost)
	}
	if run.dropped == 0 {
		run.rate = float64(run.sent) / end.Sub(start).Seconds()
		return run, bgSent, bgPassed, nil
	}
	// The frames that passed are the first ones sent: the next one is the
	// first dropped, sent in the step that holds it.
	from := make([]uint64, len(steps))
	for i, st := range steps {
		from[i] = st.from
	}
	first := steps[stepOf(from, run.passed)]
	run.banned = true
	run.took = first.at.Sub(start)
	run.rate = float64(first.from) / max(run.took.Seconds(), stepLen.Seconds())
	return run, bgSent, bgPassed, nil
}

// stepOf is the step that sent frame number n (from 0), given the frames
// sent before each step.
func stepOf(from []uint64, n uint64) int {
	i, _ := slices.BinarySearchFunc(from, n+1, func(f, t uint64) int {
		if f < t {
			return -1
		}
		return 1
	})
	return i - 1
}

// sendStep sends n of heavy, then bgN of each of bg, out of the peer.
func (e *env) sendStep(gen *sender, heavy []byte, n uint32, bg [][]byte, bgN uint32) error {
	return e.ns.Do(func() error {
		return txgen.WithoutSignals(func() error {
			if _, err := gen.run(heavy, n, e.ns.PeerIdx); err != nil {
				return err
			}
			for _, f := range bg {
				if _, err := gen.run(f, bgN, e.ns.PeerIdx); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func udpFrom(src, dst netip.Addr) []byte {
	return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 40000, 9)), src, dst))
}

// sourceCounter counts, by IPv4 source, the frames that reach an
// interface's stack (an AF_PACKET socket sees what XDP passed).
type sourceCounter struct {
	fd     int
	mu     sync.Mutex
	counts map[netip.Addr]uint64
	total  atomic.Uint64
	stop   atomic.Bool
	done   chan struct{}
}

func openSourceCounter(ns *testns.NS, ifname string) (*sourceCounter, error) {
	s := &sourceCounter{counts: map[netip.Addr]uint64{}, done: make(chan struct{})}
	err := ns.Do(func() error {
		l, err := ns.Netlink().LinkByName(ifname)
		if err != nil {
			return err
		}
		proto := int(uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return fmt.Errorf("packet socket timeout: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: l.Attrs().Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind packet socket to %s: %w", ifname, err)
		}
		s.fd = fd
		return nil
	})
	if err != nil {
		return nil, err
	}
	go s.read()
	return s, nil
}

func (s *sourceCounter) read() {
	defer close(s.done)
	buf := make([]byte, 2048)
	for !s.stop.Load() {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 34 || buf[12] != 0x08 || buf[13] != 0x00 {
			continue
		}
		src := netip.AddrFrom4([4]byte(buf[26:30]))
		s.mu.Lock()
		s.counts[src]++
		s.mu.Unlock()
		s.total.Add(1)
	}
}

func (s *sourceCounter) count(src netip.Addr) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[src]
}

// settle waits until no frame has arrived for 100 ms.
func (s *sourceCounter) settle() {
	last := s.total.Load()
	for still := 0; still < 10; {
		time.Sleep(10 * time.Millisecond)
		if n := s.total.Load(); n != last {
			last, still = n, 0
			continue
		}
		still++
	}
}

func (s *sourceCounter) Close() error {
	s.stop.Store(true)
	<-s.done
	return unix.Close(s.fd)
}

// detectorCost is internal/detect's BenchmarkAdd timed in CPU time of the
// one thread (the machine may be shared): ns and allocations per sampled
// frame added to a window (detect.BenchFrames: a quarter from one heavy
// TCP source among addresses of 65,536 /24s, aggregated to /24), with a
// tick every 100,000 samples; the median of 5 rounds.
func detectorCost() (float64, float64, error) {
	d, err := detect.New(detect.Config{PPS: 50_000, For: 2 * time.Second, Duration: 10 * time.Minute, MaxDuration: 24 * time.Hour, Bits4: 24})
	if err != nil {
		return 0, 0, err
	}
	w := d.NewWindow()
	frames := detect.BenchFrames()
	now := time.Unix(1_700_000_000, 0)
	d.Tick(now, []detect.Reading{{W: w}})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const perRound = 1 << 20
	var packets uint64
	var ns, allocs []float64
	i := 0
	for range 5 {
		var m0, m1 runtime.MemStats
		var c0, c1 unix.Timespec
		runtime.ReadMemStats(&m0)
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c0)
		for range perRound {
			w.AddFrame(frames[i&(len(frames)-1)])
			if i%100_000 == 99_999 {
				packets += 10_000_000
				now = now.Add(time.Second)
				d.Tick(now, []detect.Reading{{W: w, Packets: packets, Bytes: packets * 64}})
			}
			i++
		}
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &c1)
		runtime.ReadMemStats(&m1)
		ns = append(ns, float64(c1.Nano()-c0.Nano())/perRound)
		allocs = append(allocs, float64(m1.Mallocs-m0.Mallocs)/perRound)
	}
	return median(ns), median(allocs), nil
}

// rows are the detect section's table rows.
func (r *detectResult) rows() []string {
	var took []time.Duration
	var rates []float64
	banned := 0
	for _, run := range r.runs {
		rates = append(rates, run.rate)
		if run.banned {
			banned++
			took = append(took, run.took)
		}
	}
	want := float64(10 * r.pps)
	lo, hi := slices.Min(rates), slices.Max(rates)
	reached := fmt.Sprintf("reached %.0f–%.0f frames/s", lo, hi)
	if lo < 0.95*want {
		reached += ", short of 10× pps on this machine"
	}
	figure, ok := "never banned", met(false, fmt.Sprintf("%d of %d runs not banned within %s", len(r.runs)-banned, len(r.runs), detectGiveUpAfter))
	if len(took) > 0 {
		worst := slices.Max(took)
		var each []string
		for _, t := range took {
			each = append(each, round(t).String())
		}
		figure = fmt.Sprintf("median %s, worst %s of %d runs (%s)", round(medianDuration(took)), round(worst), len(r.runs), joinComma(each))
		if banned == len(r.runs) {
			ok = met(worst <= targetTimeToBan, fmt.Sprintf("%s over", round(worst-targetTimeToBan)))
		}
	}
	var bgRate []float64
	for _, run := range r.runs {
		bgRate = append(bgRate, run.backgroundPPS)
	}
	rows := []string{
		fmt.Sprintf("| time to ban, [bans.detect] | pps = %d, for = \"%s\", sample_rate = %d, dry_run = false; one new source per run at 10× pps = %.0f frames/s (%s), veth, sent by %s; counted at the stack | %s | — | — | ≤ %s (for + 1 s) | %s |",
			r.pps, detectFor, detectSampleRate, want, reached, r.sender, figure, targetTimeToBan, ok),
		fmt.Sprintf("| false bans, [bans.detect] | %d sources at 0.5× pps (%.0f frames/s each) during the runs above | %d banned; %d of %d frames reached the stack | — | — | 0 banned, all reach the stack | %s |",
			r.background, median(bgRate), r.bgBanned, r.bgPassed, r.bgSent, met(r.bgBanned == 0 && r.bgPassed == r.bgSent, fmt.Sprintf("%d banned, %d frames kept from the stack", r.bgBanned, r.bgSent-r.bgPassed))),
		fmt.Sprintf("| detector, per sampled frame | internal/detect's BenchmarkAdd in thread CPU time: Window.AddFrame, a quarter from one TCP source among addresses of 65,536 /24s, Tick every 100,000; median of 5 × 2^20 | %.0f ns CPU, %.2f allocs | — | — | ≤ %.0f ns (5 %% of a core at 100,000 samples/s) | %s |",
			r.nsPerAdd, r.addAllocs, targetDetectNs, met(r.nsPerAdd <= targetDetectNs, fmt.Sprintf("%.0f ns over", r.nsPerAdd-targetDetectNs))),
	}
	return rows
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

func (r *report) printDetect(w io.Writer) {
	if r.detect == nil {
		return
	}
	for _, row := range r.detect.rows() {
		fmt.Fprintln(w, row)
	}
}

func (r *report) printDetectNotes(w io.Writer) {
	d := r.detect
	if d == nil {
		return
	}
	fmt.Fprintf(w, "Detect: the plugin in process on the veth (drop = [\"gre\"], sample_actions = [\"drop\", \"pass\"], [bans.detect] as in the row); frames sent from the peer with %s in steps of %s, "+
		"each run's flood started %s later in the second than the one before, counted from the plugin's start (the detector ticks every second from about then); a packet socket on the veth counts each source's frames that reach the stack. "+
		"The frames that pass are the first ones sent, so the first dropped is the next; time to ban = the send time of its step − the first frame's; "+
		"checked: in every run the source's frames seen at the stack plus the detection's ban counter make exactly the frames sent; %d detection bans in force at the end (one a run).\n",
		d.sender, d.step, round(time.Second/time.Duration(max(len(d.runs), 1))), d.active)
	for i, run := range d.runs {
		fmt.Fprintf(w, "  run %d, %s: started %s into a second of the plugin's; %d sent, %d reached the stack, %d dropped by the ban; time to ban %s at %.0f frames/s\n",
			i+1, run.source, round(run.phase), run.sent, run.passed, run.dropped, round(run.took), run.rate)
	}
}
