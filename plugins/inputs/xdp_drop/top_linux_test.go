//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/handover"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

func udpFrameFrom(src netip.Addr, payload int) []byte {
	l4 := frames.Ports(frames.UDP(payload), 53, 40000)
	if src.Is4() {
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, l4), src, netip.MustParseAddr("198.51.100.1")))
	}
	return frames.Ether(frames.EtherIPv6, frames.Addressed(frames.IPv6(frames.ProtoUDP, l4), src, netip.MustParseAddr("2001:db8:ffff::1")))
}

// waitSamplesRead waits until the interface's program has counted frames
// frames and its reader has received every event the kernel put in its
// ring; unlike a gather, it leaves the interval's tables alone.
func waitSamplesRead(t *testing.T, p *XDPDrop, frames uint64) {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for {
		p.mu.Lock()
		ifc := p.links.ifaces[0]
		var c bpf.Counters
		require.NoError(t, ifc.prog.ReadCounters(&c))
		var counted uint64
		for _, v := range c {
			counted += v.Packets
		}
		counts, err := ifc.prog.SampleCounts()
		require.NoError(t, err)
		ifc.tap.sampler.mu.Lock()
		got := ifc.tap.sampler.received
		ifc.tap.sampler.mu.Unlock()
		p.mu.Unlock()
		if counted >= frames && got == counts.Sent {
			return
		}
		require.True(t, time.Now().Before(deadline), "counted %d of %d frames, received %d of %d samples", counted, frames, got, counts.Sent)
		time.Sleep(10 * time.Millisecond)
	}
}

// newSampling is the plugin on the test veth with sampling at rate.
func newSampling(rate int64) *XDPDrop {
	p := New()
	p.Interfaces, p.Drop, p.Log = []string{testns.Dev}, []any{"udp"}, testutil.Logger{}
	p.HandoverTimeout = 0
	p.SampleRate = rate
	return p
}

func gatherOnce(t *testing.T, ns *testns.NS, p *XDPDrop) *testutil.Accumulator {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Empty(t, acc.Errors)
	return acc
}

func metricsNamed(acc *testutil.Accumulator, name string) []telegraf.Metric {
	var out []telegraf.Metric
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == name {
			out = append(out, m)
		}
	}
	return out
}

// accuracyFrames is the accuracy test's traffic, shuffled: heavy sources
// at 2, 4, 6, 8 and 10 % of total (each from several addresses of its
// prefix, so that the aggregation is exercised), the rest from 10,000
// random sources.
func accuracyFrames(v6 bool, total int, rng *rand.Rand) (frames [][]byte, heavy []string) {
	const spoofed = 10_000
	for i := 1; i <= 5; i++ {
		var prefix netip.Prefix
		if v6 {
			prefix = netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x:%x::/64", 0x100*i, i))
		} else {
			prefix = netip.MustParsePrefix(fmt.Sprintf("203.0.%d.0/24", 100+i))
		}
		heavy = append(heavy, prefix.String())
		n := total * 2 * i / 100
		for j := 0; j < n; j++ {
			a := prefix.Addr().AsSlice()
			a[len(a)-1] = byte(j%250 + 1)
			addr, _ := netip.AddrFromSlice(a)
			frames = append(frames, udpFrameFrom(addr, 18))
		}
	}
	sources := make([]netip.Addr, spoofed)
	for i := range sources {
		var a [16]byte
		for k := range a {
			a[k] = byte(rng.UintN(256))
		}
		if v6 {
			a[0] = 0x30 // away from the heavy 2001:db8::/32
			sources[i] = netip.AddrFrom16(a)
		} else {
			a[0] = byte(1 + rng.UintN(200)) // away from the heavy 203/8
			sources[i] = netip.AddrFrom4([4]byte(a[:4]))
		}
	}
	for len(frames) < total {
		frames = append(frames, udpFrameFrom(sources[len(frames)%spoofed], 18))
	}
	rng.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
	return frames, heavy
}

// TestTopSourcesAccuracy: among 10,000 spoofed sources, the 5 heavy ones
// are ranks 1-5 in order, aggregated to their /24 or /64, each share within
// 1.5 percentage points of the truth. With 200,000 frames sampled 1 in 10
// (about 20,000 samples) the sampling error of a share p has a standard
// deviation of sqrt(p(1-p)/20,000), at most 0.21 points (p = 10 %), so the
// bound is 7 of them; Space-Saving's overestimate adds at most 1/1024 of
// the samples, 0.1 points.
func TestTopSourcesAccuracy(t *testing.T) {
	const total, rate, bound = 200_000, 10, 0.015
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) {
			sd := math.Sqrt(0.1 * 0.9 / (total / rate))
			require.GreaterOrEqual(t, bound, 5*sd, "the bound must be 5 standard deviations")
			ns := testns.New(t)
			p := newSampling(rate)
			p.SampleMaxPerSecond = MaxSampleMaxPerSecond
			startPlugin(t, ns, p)
			gatherOnce(t, ns, p) // starts the reader

			rng := rand.New(rand.NewPCG(23, 42))
			fs, heavy := accuracyFrames(v6, total, rng)
			require.NoError(t, ns.SendRaw(testns.Peer, fs))
			waitSamplesRead(t, p, total)
			acc := gatherOnce(t, ns, p)

			for _, m := range metricsNamed(acc, MeasurementLink) {
				require.Equal(t, uint64(0), m.Fields()[FieldSampleCapped])
				require.Equal(t, uint64(0), m.Fields()[FieldSampleLost])
			}
			top := metricsNamed(acc, MeasurementTop)
			require.Len(t, top, 10, "top_sources = 10")
			for i, m := range top {
				require.Equal(t, map[string]string{"interface": testns.Dev, "action": "drop", "rank": strconv.Itoa(i + 1)}, m.Tags())
				require.Equal(t, "udp", m.Fields()[FieldProtocol])
				if i >= 5 {
					continue
				}
				want := heavy[4-i]
				wantShare := float64(10-2*i) / 100
				require.Equal(t, want, m.Fields()[FieldSource], "rank %d", i+1)
				share := m.Fields()[FieldShare].(float64)
				require.InDelta(t, wantShare, share, bound, "rank %d share", i+1)
				// The estimate of packets is the share of the frames sampled, times the rate.
				packets := float64(m.Fields()[FieldPackets].(uint64))
				require.InDelta(t, wantShare*total, packets, 0.15*wantShare*total, "rank %d packets", i+1)
				t.Logf("rank %d %s share %.4f (want %.2f) packets %.0f", i+1, want, share, wantShare, packets)
			}
			// The next interval starts empty: no point without samples.
			require.Empty(t, metricsNamed(gatherOnce(t, ns, p), MeasurementTop))
		})
	}
}

// TestSampleCapAndCounters: with every frame sampled and a cap of 100 per
// second, a flood reaches user space at the cap; the rest is counted as
// capped, and sampled + capped + lost is every frame.
func TestSampleCapAndCounters(t *testing.T) {
	const perSecond, n = 100, 200_000
	ns := testns.New(t)
	p := newSampling(1)
	p.SampleMaxPerSecond = perSecond
	startPlugin(t, ns, p)
	gatherOnce(t, ns, p)
	start := time.Now()
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("192.0.2.1"), 18), n)
	elapsed := time.Since(start)
	waitSamplesRead(t, p, n)
	acc := gatherOnce(t, ns, p)
	link := metricsNamed(acc, MeasurementLink)
	require.Len(t, link, 1)
	f := link[0].Fields()
	sampled, capped, lost := f[FieldSampled].(uint64), f[FieldSampleCapped].(uint64), f[FieldSampleLost].(uint64)
	require.Equal(t, uint64(n), sampled+capped+lost, "every frame is sampled, capped or lost")
	most := uint64(perSecond/20) + uint64(math.Ceil(time.Since(start).Seconds()*perSecond))
	t.Logf("sent %d in %v: sampled %d, capped %d, lost %d", n, elapsed, sampled, capped, lost)
	require.LessOrEqual(t, sampled, most, "at most the burst and the rate over %v", elapsed)
	require.Positive(t, capped)
}

// TestSamplerRestarts: a sampler whose reader stopped (here closed, with
// a read error put in its place) is started again at the next gather: the
// error is reported once, and the interface samples again, counting on.
func TestSamplerRestarts(t *testing.T) {
	ns := testns.New(t)
	p := newSampling(1)
	startPlugin(t, ns, p)
	gatherOnce(t, ns, p)
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("192.0.2.1"), 18), 10)
	waitSamplesRead(t, p, 10)

	p.mu.Lock()
	s := p.links.ifaces[0].tap.sampler
	require.NoError(t, s.reader.Close())
	<-s.done
	s.mu.Lock()
	s.err = errors.New("injected read failure")
	s.mu.Unlock()
	p.mu.Unlock()

	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], `interface "xdpt0": injected read failure`)
	top := metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 1, "what the stopped reader read is reported")
	require.Equal(t, uint64(10), top[0].Fields()[FieldPackets])

	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("198.51.100.7"), 18), 20)
	waitSamplesRead(t, p, 30)
	acc = gatherOnce(t, ns, p) // no error: reported once
	top = metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 1)
	require.Equal(t, "198.51.100.0/24", top[0].Fields()[FieldSource])
	require.Equal(t, uint64(20), top[0].Fields()[FieldPackets])
	link := metricsNamed(acc, MeasurementLink)
	require.Equal(t, uint64(30), link[0].Fields()[FieldSampled], "the count goes on")
}

func sendFrames(t *testing.T, ns *testns.NS, frame []byte, n int) {
	t.Helper()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) }))
}

// TestCaptureReadBack: the capture read back with tshark holds the sent
// frames' first capture_snaplen bytes, on the interface, with their whole
// length; the file is 0600 and this user's.
func TestCaptureReadBack(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
			t.Fatal("tshark is not installed (apt-get install tshark): CI reads the capture back with it")
		}
		t.Skip("tshark is not installed (apt-get install tshark)")
	}
	ns := testns.New(t)
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	p := newSampling(1)
	p.CapturePath, p.CaptureSnaplen = path, 64
	startPlugin(t, ns, p)
	gatherOnce(t, ns, p)
	var sent [][]byte
	for i := 0; i < 20; i++ {
		sent = append(sent, udpFrameFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), 10+i*10))
	}
	tcp := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoTCP, 0, frames.TCP(10)))
	require.NoError(t, ns.SendRaw(testns.Peer, append(sent, tcp)))
	waitSamplesRead(t, p, uint64(len(sent)+1))
	inNS(t, ns, p, func() error { p.Stop(); return nil })

	out, err := exec.Command("tshark", "-r", path, "-T", "fields", "-e", "frame.interface_name", "-e", "frame.len", "-e", "frame.cap_len", "-e", "frame").Output()
	require.NoError(t, err)
	hexOut, err := exec.Command("tshark", "-r", path, "-x").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(sent), "only the dropped frames (sample_actions default)")
	dumps := hexFrames(string(hexOut))
	require.Len(t, dumps, len(sent))
	for i, l := range lines {
		fields := strings.Split(l, "\t")
		require.Equal(t, testns.Dev, fields[0])
		require.Equal(t, strconv.Itoa(len(sent[i])), fields[1])
		require.Equal(t, strconv.Itoa(min(64, len(sent[i]))), fields[2])
		require.Equal(t, sent[i][:min(64, len(sent[i]))], dumps[i], "frame %d", i)
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// hexFrames parses tshark -x output: one hex dump per frame.
func hexFrames(out string) [][]byte {
	var all [][]byte
	for _, block := range strings.Split(out, "\n\n") {
		var b []byte
		for _, line := range strings.Split(block, "\n") {
			if len(line) < 6 {
				continue
			}
			_, rest, ok := strings.Cut(line, "  ")
			if !ok {
				continue
			}
			hexPart := rest
			if len(hexPart) > 48 {
				hexPart = hexPart[:48]
			}
			for _, h := range strings.Fields(hexPart) {
				v, err := strconv.ParseUint(h, 16, 8)
				if err != nil || len(h) != 2 {
					break
				}
				b = append(b, byte(v))
			}
		}
		if len(b) > 0 {
			all = append(all, b)
		}
	}
	return all
}

// TestHandoverSampling: a successor takes over a sampling program handed
// over in place: the counters continue, on a fresh program whose ring it
// reads, so sampling goes on; its first estimates are of its own frames.
func TestHandoverSampling(t *testing.T) {
	ns := testns.New(t)
	old := newSampling(1)
	require.NoError(t, old.Init())
	prog, err := bpf.Load(old.links.policy)
	require.NoError(t, err)
	defer prog.Close()
	require.NoError(t, ns.Attach(testns.Dev, func() error { return prog.Attach(ns.DevIdx, bpf.ModeNative) }))
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("192.0.2.1"), 18), 100)
	oldID := prog.ID()
	l, p, m, err := prog.FDs()
	require.NoError(t, err)
	var netns uint64
	require.NoError(t, ns.Do(func() (err error) { netns, err = handover.CurrentNetNS(); return err }))
	dir := hold(t, []handover.Offer{{
		Header: handover.Header{Key: handover.Key{NetNS: netns, Ifindex: ns.DevIdx}, Interface: testns.Dev,
			Mode: string(bpf.ModeNative), Fingerprint: prog.Fingerprint(), ProgramID: uint32(prog.ID())},
		FDs: dupAll(t, l, p, m),
	}})
	require.NoError(t, prog.Close(), "only the holder has the link now")

	x := newSampling(1)
	require.NoError(t, x.Init())
	x.links.handoff.dir = dir // after Init, which sets it
	acc := &testutil.Accumulator{}
	inNS(t, ns, x, func() error { return x.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, x, func() error { x.Stop(); return nil }) })
	require.Empty(t, acc.Errors)
	require.NotEqual(t, oldID, x.links.ifaces[0].prog.ID(), "a fresh program, with a ring of its own")
	// No gather before the frames: the estimates scale to what was counted since Start.
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("198.51.100.7"), 18), 50)
	waitSamplesRead(t, x, 150)
	acc = gatherOnce(t, ns, x)
	packets, ok := withTraffic(acc).Get("xdp_drop")
	require.True(t, ok)
	require.Equal(t, uint64(150), packets.Fields["packets"], "the counters continue")
	top := metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 1)
	require.Equal(t, "198.51.100.0/24", top[0].Fields()[FieldSource])
	require.Equal(t, uint64(50), top[0].Fields()[FieldPackets])
	link := metricsNamed(acc, MeasurementLink)
	require.Equal(t, uint64(50), link[0].Fields()[FieldSampled])
}

// TestSamplingPinnedAndKept: with pin_path and keep_attached a restarted
// plugin continues the pinned counters and takes the kept link over, and
// its own program samples: the top sources and their estimates are this
// run's frames only.
func TestSamplingPinnedAndKept(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	run := func(src string, n int, total uint64) *testutil.Accumulator {
		p := newSampling(1)
		p.PinPath, p.KeepAttached = dir, true
		require.Empty(t, startPlugin(t, ns, p).Errors)
		// No gather before the frames: the estimates scale to what was counted since Start.
		sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr(src), 18), n)
		waitSamplesRead(t, p, total)
		acc := gatherOnce(t, ns, p)
		inNS(t, ns, p, func() error { p.Stop(); return nil })
		return acc
	}
	run("192.0.2.1", 30, 30)
	acc := run("198.51.100.1", 20, 50)
	require.Equal(t, uint64(50), packetsOf(acc, testns.Dev), "the pinned counters continue")
	top := metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 1)
	require.Equal(t, "198.51.100.0/24", top[0].Fields()[FieldSource])
	require.Equal(t, uint64(20), top[0].Fields()[FieldPackets])
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.NotZero(t, id, "keep_attached keeps it attached")
}

// TestFDsPerInterfaceSampling: with sampling each attached interface holds
// the descriptors its policy's FDs says (maps and the ring's reader, which
// starts with the plugin), and gives them back on stop.
func TestFDsPerInterfaceSampling(t *testing.T) {
	ns := testns.New(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	p := newSampling(100)
	p.Interfaces = []string{testns.Dev, "xdpt2"}
	require.NoError(t, p.Init())
	before := openFDs(t)
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	require.Empty(t, acc.Errors)
	require.NotNil(t, p.links.ifaces[0].tap.sampler, "the reader starts with the plugin, not at the first gather")
	require.Equal(t, 2*p.links.policy.FDs(), openFDs(t)-before)
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	require.Equal(t, before, openFDs(t), "released")
}

// TestSamplingPrefixFileSwap: a prefix file's change swaps a new program
// onto each interface's link; each keeps its own sample ring, which its
// reader goes on reading, and the swapped-in rule names the sources.
func TestSamplingPrefixFileSwap(t *testing.T) {
	ns := testns.New(t)
	_, _, err := ns.AddVeth("xdpm0", "xdpm0p")
	require.NoError(t, err)
	list := filepath.Join(t.TempDir(), "drop.txt")
	writeList(t, list, listV1...)
	p := newSampling(1)
	p.Interfaces, p.Drop = []string{testns.Dev, "xdpm0"}, nil
	p.Rules = []Rule{{Name: "blocklist", Action: "drop", SrcPrefixFile: []string{list}}}
	require.Empty(t, startPlugin(t, ns, p).Errors)
	gatherOnce(t, ns, p)
	readers := []*sampler{p.links.ifaces[0].tap.sampler, p.links.ifaces[1].tap.sampler}

	writeList(t, list, listV2...)
	gatherOnce(t, ns, p) // swaps
	require.Equal(t, p.files.gen, p.links.ifaces[0].rulesGen, "swapped")
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("203.0.113.9"), 18), 40)
	waitSamplesRead(t, p, 40)
	acc := gatherOnce(t, ns, p)
	top := metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 1, "only the interface with traffic")
	require.Equal(t, testns.Dev, top[0].Tags()["interface"])
	require.Equal(t, "203.0.113.0/24", top[0].Fields()[FieldSource])
	require.Equal(t, uint64(40), top[0].Fields()[FieldPackets])
	require.Equal(t, "blocklist", top[0].Fields()[FieldRule], "the new list's prefix decided them")
	for i, ifc := range p.links.ifaces {
		require.Same(t, readers[i], ifc.tap.sampler, "%s: the same reader", ifc.name)
	}
	ring := func(i int) ebpf.MapID {
		info, err := p.links.ifaces[i].prog.XDP().Info()
		require.NoError(t, err)
		ids, _ := info.MapIDs()
		for _, id := range ids {
			m, err := ebpf.NewMapFromID(id)
			require.NoError(t, err)
			typ := m.Type()
			m.Close()
			if typ == ebpf.RingBuf {
				return id
			}
		}
		t.Fatalf("%s: no ring", p.links.ifaces[i].name)
		return 0
	}
	require.NotEqual(t, ring(0), ring(1), "a ring per interface")
}

// TestSamplingPerCPU: with per_cpu on, the counters carry the cpu tag and
// the top sources are still one table per interface and action, exact at
// sample_rate = 1.
func TestSamplingPerCPU(t *testing.T) {
	ns := testns.New(t)
	p := newSampling(1)
	p.PerCPU = true
	p.TopSources = 2
	startPlugin(t, ns, p)
	gatherOnce(t, ns, p)
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("192.0.2.7"), 18), 50)
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("198.18.0.9"), 18), 30)
	waitSamplesRead(t, p, 80)
	acc := gatherOnce(t, ns, p)

	var dropped uint64
	for _, m := range metricsNamed(acc, MeasurementCounters) {
		_, hasCPU := m.GetTag(TagCPU)
		require.True(t, hasCPU, "per_cpu: %v", m)
		if m.Tags()[TagAction] == "drop" && m.Tags()[TagProtocol] == "udp" {
			dropped += m.Fields()[FieldPackets].(uint64)
		}
	}
	require.Equal(t, uint64(80), dropped, "udp drops over every cpu")

	top := metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 2, "one table per interface and action, not per cpu")
	want := map[string]struct {
		source  string
		packets uint64
	}{"1": {"192.0.2.0/24", 50}, "2": {"198.18.0.0/24", 30}}
	for _, m := range top {
		_, hasCPU := m.GetTag(TagCPU)
		require.False(t, hasCPU, "the top sources are per interface: %v", m)
		w := want[m.Tags()[TagRank]]
		require.Equal(t, w.source, m.Fields()[FieldSource], "%v", m)
		require.Equal(t, w.packets, m.Fields()[FieldPackets], "%v", m)
	}
}

// countedBy sums a gather's xdp_drop counters by action: cumulative frames
// and bytes.
func countedBy(acc *testutil.Accumulator) map[string]bpf.Counter {
	out := map[string]bpf.Counter{}
	for _, m := range metricsNamed(acc, MeasurementCounters) {
		c := out[m.Tags()[TagAction]]
		c.Packets += m.Fields()[FieldPackets].(uint64)
		c.Bytes += m.Fields()[FieldBytes].(uint64)
		out[m.Tags()[TagAction]] = c
	}
	return out
}

// topBy sums a gather's xdp_drop_top estimates by action, and lists the
// sources.
func topBy(acc *testutil.Accumulator) (map[string]bpf.Counter, map[string][]string) {
	sums, sources := map[string]bpf.Counter{}, map[string][]string{}
	for _, m := range metricsNamed(acc, MeasurementTop) {
		a := m.Tags()[TagAction]
		c := sums[a]
		c.Packets += m.Fields()[FieldPackets].(uint64)
		c.Bytes += m.Fields()[FieldBytes].(uint64)
		sums[a] = c
		sources[a] = append(sources[a], m.Fields()[FieldSource].(string))
	}
	return sums, sources
}

// TestTopEstimatesUnderCap: under a flood the cap lets through a few
// hundred of 80,000 sampled frames, yet the estimates of an action's
// sources (all shown: fewer than top_sources) add up, within 5 %, to the
// frames and bytes sent of that action in the interval, the second
// interval as the first: they scale to the exact counters, not the samples.
func TestTopEstimatesUnderCap(t *testing.T) {
	const perSecond = 1000
	ns := testns.New(t)
	p := newSampling(1)
	p.SampleMaxPerSecond = perSecond
	p.SampleActions = []string{"drop", "pass"}
	startPlugin(t, ns, p)
	prev := gatherOnce(t, ns, p) // the first interval starts here

	tcp := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoTCP, 0, frames.TCP(10)),
		netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("198.51.100.1")))
	flows := []struct {
		action string
		source string
		frame  []byte
		count  int
	}{
		{"drop", "192.0.2.0/24", udpFrameFrom(netip.MustParseAddr("192.0.2.1"), 18), 30_000},
		{"drop", "198.51.100.0/24", udpFrameFrom(netip.MustParseAddr("198.51.100.7"), 18), 18_000},
		{"drop", "2001:db8:1::/64", udpFrameFrom(netip.MustParseAddr("2001:db8:1::5"), 18), 12_000},
		{"pass", "203.0.113.0/24", tcp, 20_000},
	}
	sent := map[string]bpf.Counter{}
	var total uint64
	for _, f := range flows {
		c := sent[f.action]
		c.Packets += uint64(f.count)
		c.Bytes += uint64(f.count * len(f.frame))
		sent[f.action] = c
	}
	var capped uint64
	for round := 1; round <= 2; round++ {
		for _, f := range flows {
			sendFrames(t, ns, f.frame, f.count)
			total += uint64(f.count)
		}
		waitSamplesRead(t, p, total)
		acc := gatherOnce(t, ns, p)

		link := metricsNamed(acc, MeasurementLink)[0].Fields()
		require.Greater(t, link[FieldSampleCapped].(uint64), capped+60_000, "round %d: the cap refused most samples", round)
		capped = link[FieldSampleCapped].(uint64)
		now, before := countedBy(acc), countedBy(prev)
		sums, sources := topBy(acc)
		for _, action := range []string{"drop", "pass"} {
			interval := bpf.Counter{Packets: now[action].Packets - before[action].Packets, Bytes: now[action].Bytes - before[action].Bytes}
			require.Equal(t, sent[action], interval, "round %d %s: counted exactly what was sent", round, action)
			var want []string
			for _, f := range flows {
				if f.action == action {
					want = append(want, f.source)
				}
			}
			require.ElementsMatch(t, want, sources[action], "round %d %s: every source", round, action)
			got := sums[action]
			t.Logf("round %d %s: sent %d frames (%d bytes), the estimates add up to %d (%d bytes); %d samples in all, %d capped",
				round, action, sent[action].Packets, sent[action].Bytes, got.Packets, got.Bytes, link[FieldSampled], capped)
			require.InDelta(t, float64(sent[action].Packets), float64(got.Packets), 0.05*float64(sent[action].Packets), "round %d %s: Σ packets", round, action)
			require.InDelta(t, float64(sent[action].Bytes), float64(got.Bytes), 0.05*float64(sent[action].Bytes), "round %d %s: Σ bytes", round, action)
		}
		prev = acc
	}
}

// TestTopSourcesIPv4Mapped: IPv6 frames from an IPv4-mapped address
// (::ffff:198.51.100.7, which anyone can send) are an IPv6 source,
// aggregated to top_source_prefix_ipv6, apart from the IPv4 network
// 198.51.100.0/24, whose own frames are counted alone.
func TestTopSourcesIPv4Mapped(t *testing.T) {
	for _, c := range []struct {
		bits6  int64
		source string
	}{{64, "::/64"}, {120, "::ffff:198.51.100.0/120"}} {
		t.Run(strconv.Itoa(int(c.bits6)), func(t *testing.T) {
			ns := testns.New(t)
			p := newSampling(1)
			p.TopSourcePrefixV6 = c.bits6
			startPlugin(t, ns, p)
			gatherOnce(t, ns, p)
			sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("::ffff:198.51.100.7"), 18), 30)
			sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("198.51.100.7"), 18), 20)
			waitSamplesRead(t, p, 50)
			acc := gatherOnce(t, ns, p)
			got := map[string]uint64{}
			for _, m := range metricsNamed(acc, MeasurementTop) {
				got[m.Fields()[FieldSource].(string)] = m.Fields()[FieldPackets].(uint64)
			}
			require.Equal(t, map[string]uint64{c.source: 30, "198.51.100.0/24": 20}, got)
		})
	}
}

// TestTopFirstGather: the first gather after frames were sampled reports
// them, though the reader has not been woken to read them yet (a few
// events wake it only at its next poll), with the gather's own time; and
// a gather's points end with the xdp_drop_link points, so that a reader of
// line protocol can take one to end the gather.
func TestTopFirstGather(t *testing.T) {
	const n = 44
	ns := testns.New(t)
	p := newSampling(1)
	startPlugin(t, ns, p)
	gatherOnce(t, ns, p)
	sendFrames(t, ns, udpFrameFrom(netip.MustParseAddr("192.0.2.1"), 18), n)
	// In the ring, as far as the kernel is concerned: the reader is left alone.
	deadline := time.Now().Add(testns.Hang)
	for {
		p.mu.Lock()
		counts, err := p.links.ifaces[0].prog.SampleCounts()
		p.mu.Unlock()
		require.NoError(t, err)
		if counts.Sent == n {
			break
		}
		require.True(t, time.Now().Before(deadline), "the program sampled %d of %d frames", counts.Sent, n)
		time.Sleep(time.Millisecond)
	}

	before := time.Now()
	acc := gatherOnce(t, ns, p)
	after := time.Now()
	top := metricsNamed(acc, MeasurementTop)
	require.Len(t, top, 1, "the first gather after the samples has them")
	require.Equal(t, "192.0.2.0/24", top[0].Fields()[FieldSource])
	require.Equal(t, uint64(n), top[0].Fields()[FieldPackets])
	all := acc.GetTelegrafMetrics()
	for _, m := range all {
		require.False(t, m.Time().Before(before) || m.Time().After(after), "%s at %v: not in the gather, %v to %v", m.Name(), m.Time(), before, after)
	}
	require.Equal(t, MeasurementLink, all[len(all)-1].Name(), "the gather ends with the link points")
	require.Empty(t, metricsNamed(gatherOnce(t, ns, p), MeasurementTop), "reported once")
}
