//go:build linux

package xdp_drop

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/influxdata/telegraf/config"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/pcapng"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/topk"
)

// sampled is the plugin with sampling on, the rest as given by set.
func sampled(set func(p *XDPDrop)) *XDPDrop {
	p := New()
	p.Interfaces, p.Drop, p.SampleRate = []string{"eth1"}, []any{"udp"}, 1000
	set(p)
	return p
}

func TestSamplingDefaults(t *testing.T) {
	p := sampled(func(*XDPDrop) {})
	require.NoError(t, p.Init())
	require.Equal(t, bpf.Sampling{Rate: 1000, Actions: [bpf.ActionCount]bool{bpf.ActionDrop: true}, MaxPerSecond: 10_000, Snaplen: 128}, p.links.policy.Sample)

	p = sampled(func(p *XDPDrop) { p.DryRun, p.SampleActions = true, []string{"would_drop", "pass"} })
	require.NoError(t, p.Init())
	require.Equal(t, [bpf.ActionCount]bool{true, true}, p.links.policy.Sample.Actions)

	off := New()
	off.Interfaces, off.Drop = []string{"eth1"}, []any{"udp"}
	require.NoError(t, off.Init())
	require.False(t, off.links.policy.Sample.On(), "sample_rate defaults to 0: no sampling code")

	// Off, the defaults written out are accepted.
	off = New()
	_, err := toml.Decode(`
interfaces = ["eth1"]
drop = ["udp"]
sample_rate = 0
sample_max_per_second = 10000
top_sources = 10
top_source_prefix_ipv4 = 24
top_source_prefix_ipv6 = 64
capture_snaplen = 128
capture_max_size = "64MiB"
capture_files = 2
`, off)
	require.NoError(t, err)
	require.NoError(t, off.Init())
	require.False(t, off.links.policy.Sample.On())
}

// TestSamplingTOML: the options decode from TOML as the binary reads them,
// sizes as Telegraf writes them.
func TestSamplingTOML(t *testing.T) {
	p := New()
	_, err := toml.Decode(`
interfaces = ["eth1"]
drop = ["udp"]
sample_rate = 100
sample_actions = ["drop", "pass"]
sample_max_per_second = 500
top_sources = 3
top_source_prefix_ipv4 = 16
top_source_prefix_ipv6 = 48
capture_snaplen = 256
capture_max_size = "1MiB"
capture_files = 5
`, p)
	require.NoError(t, err)
	require.NoError(t, p.Init())
	require.Equal(t, bpf.Sampling{Rate: 100, Actions: [bpf.ActionCount]bool{true, true}, MaxPerSecond: 500, Snaplen: 256}, p.links.policy.Sample)
	require.Equal(t, config.Size(1<<20), p.CaptureMaxSize)
	require.Equal(t, int64(5), p.CaptureFiles)
	require.Equal(t, int64(16), p.TopSourcePrefixV4)
}

func TestSamplingErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	long := "/" + strings.Repeat("c", 5000)
	shared := filepath.Join(dir, "shared")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, os.ModeSticky|0o777)) // as /tmp
	cases := []struct {
		name string
		set  func(p *XDPDrop)
		want []string
	}{
		{"negative rate", func(p *XDPDrop) { p.SampleRate = -1 }, []string{"sample_rate = -1", "out of range", "sample_rate = 1000"}},
		{"rate above the program's", func(p *XDPDrop) { p.SampleRate = bpf.SampleRateMax + 1 }, []string{"sample_rate = 1073741825 is out of range", "N up to 1073741824"}},
		{"capture without rate", func(p *XDPDrop) { p.SampleRate, p.CapturePath = 0, filepath.Join(dir, "c.pcapng") }, []string{"capture_path", "needs sample_rate"}},
		{"actions without rate", func(p *XDPDrop) { p.SampleRate, p.SampleActions = 0, []string{"drop"} }, []string{"sample_actions", "sample_rate is 0"}},
		{"unknown action", func(p *XDPDrop) { p.SampleActions = []string{"dropped"} }, []string{"sample_actions", `"dropped"`, `"would_drop"`}},
		{"empty actions", func(p *XDPDrop) { p.SampleActions = []string{} }, []string{"sample_actions is empty"}},
		{"action twice", func(p *XDPDrop) { p.SampleActions = []string{"pass", "pass"} }, []string{"sample_actions", `"pass"`, "twice"}},
		{"drop in dry run", func(p *XDPDrop) { p.DryRun = true; p.SampleActions = []string{"drop"} }, []string{"sample_actions", `"drop"`, "dry run", `"would_drop"`}},
		{"would_drop outside dry run", func(p *XDPDrop) { p.SampleActions = []string{"would_drop"} }, []string{"sample_actions", `"would_drop"`, `"drop"`}},
		{"cap 0", func(p *XDPDrop) { p.SampleMaxPerSecond = 0 }, []string{"sample_max_per_second = 0", "1 to 1000000"}},
		{"cap too high", func(p *XDPDrop) { p.SampleMaxPerSecond = 2_000_000 }, []string{"sample_max_per_second = 2000000"}},
		{"top too many", func(p *XDPDrop) { p.TopSources = 101 }, []string{"top_sources = 101", "0 (no xdp_drop_top) to 100"}},
		{"ipv4 prefix", func(p *XDPDrop) { p.TopSourcePrefixV4 = 33 }, []string{"top_source_prefix_ipv4 = 33", "1 to 32"}},
		{"ipv6 prefix", func(p *XDPDrop) { p.TopSourcePrefixV6 = 0 }, []string{"top_source_prefix_ipv6 = 0", "1 to 128"}},
		{"snaplen too big", func(p *XDPDrop) { p.CaptureSnaplen = 5000 }, []string{"capture_snaplen = 5000", "1 to 4096"}},
		{"snaplen too short for top", func(p *XDPDrop) { p.CaptureSnaplen = 40 }, []string{"capture_snaplen = 40", "top_sources", "at least 46"}},
		{"capture size too small", func(p *XDPDrop) { p.CaptureMaxSize = config.Size(1000) }, []string{"capture_max_size = 1000", `"64MiB"`}},
		{"relative capture", func(p *XDPDrop) { p.CapturePath = "drops.pcapng" }, []string{`capture_path = "drops.pcapng"`, "absolute"}},
		{"capture dir missing", func(p *XDPDrop) { p.CapturePath = filepath.Join(dir, "nope", "c.pcapng") }, []string{"capture_path", "does not exist", "create it"}},
		{"capture in a FIFO", func(p *XDPDrop) { p.CapturePath = filepath.Join(fifo, "c.pcapng") }, []string{"capture_path", "not a directory"}},
		{"capture in a shared directory", func(p *XDPDrop) { p.CapturePath = filepath.Join(shared, "c.pcapng") },
			[]string{`capture_path = "` + shared + `/c.pcapng" is in ` + shared + ", which other users may write (mode 1777): one could create the capture's files there first and stop it; choose a directory only the service user may write"}},
		{"no capture files", func(p *XDPDrop) { p.CaptureFiles = 0 }, []string{"capture_files = 0 is out of range; use 1 to 100 rotated files kept beside the capture (default 2)"}},
		{"too many capture files", func(p *XDPDrop) { p.CaptureFiles = 101 }, []string{"capture_files = 101 is out of range"}},
		{"off, capture files set", func(p *XDPDrop) { p.SampleRate, p.CaptureFiles = 0, 5 }, []string{"capture_files = 5 has no effect with sample_rate = 0"}},
		{"capture path too long", func(p *XDPDrop) { p.CapturePath = long }, []string{"capture_path", "…(5001 bytes)", "at most 4095"}},
		// Off, the bounds hold all the same, and a value set does nothing.
		{"off, top negative", func(p *XDPDrop) { p.SampleRate, p.TopSources = 0, -5 }, []string{"top_sources = -5", "out of range"}},
		{"off, snaplen 0", func(p *XDPDrop) { p.SampleRate, p.CaptureSnaplen = 0, 0 }, []string{"capture_snaplen = 0", "1 to 4096"}},
		{"off, cap too high", func(p *XDPDrop) { p.SampleRate, p.SampleMaxPerSecond = 0, 1e9 }, []string{"sample_max_per_second = 1000000000", "out of range"}},
		{"off, ipv4 prefix 99", func(p *XDPDrop) { p.SampleRate, p.TopSourcePrefixV4 = 0, 99 }, []string{"top_source_prefix_ipv4 = 99", "1 to 32"}},
		{"off, ipv6 prefix 0", func(p *XDPDrop) { p.SampleRate, p.TopSourcePrefixV6 = 0, 0 }, []string{"top_source_prefix_ipv6 = 0", "1 to 128"}},
		{"off, capture size too small", func(p *XDPDrop) { p.SampleRate, p.CaptureMaxSize = 0, config.Size(1000) }, []string{"capture_max_size = 1000"}},
		{"off, cap set", func(p *XDPDrop) { p.SampleRate, p.SampleMaxPerSecond = 0, 500 }, []string{"sample_max_per_second = 500", "no effect with sample_rate = 0", "set sample_rate"}},
		{"off, top set", func(p *XDPDrop) { p.SampleRate, p.TopSources = 0, 3 }, []string{"top_sources = 3", "no effect with sample_rate = 0", "set sample_rate"}},
		{"off, top none", func(p *XDPDrop) { p.SampleRate, p.TopSources = 0, 0 }, []string{"top_sources = 0", "no effect with sample_rate = 0"}},
		{"off, ipv4 prefix set", func(p *XDPDrop) { p.SampleRate, p.TopSourcePrefixV4 = 0, 16 }, []string{"top_source_prefix_ipv4 = 16", "no effect with sample_rate = 0"}},
		{"off, ipv6 prefix set", func(p *XDPDrop) { p.SampleRate, p.TopSourcePrefixV6 = 0, 48 }, []string{"top_source_prefix_ipv6 = 48", "no effect with sample_rate = 0"}},
		{"off, snaplen set", func(p *XDPDrop) { p.SampleRate, p.CaptureSnaplen = 0, 256 }, []string{"capture_snaplen = 256", "no effect with sample_rate = 0"}},
		{"off, capture size set", func(p *XDPDrop) { p.SampleRate, p.CaptureMaxSize = 0, config.Size(1<<20) }, []string{"capture_max_size = 1048576 bytes", "no effect with sample_rate = 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := sampled(c.set).Init()
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestTopPoints: the heaviest sources of an interval become bounded
// points: rank the tag, source a field, estimates their share of the
// frames (bytes) the action counted in the interval.
func TestTopPoints(t *testing.T) {
	p := sampled(func(p *XDPDrop) {
		p.TopSources = 2
		p.Rules = []Rule{{Name: "reflection", Action: "drop", Protocol: []any{"udp"}, SrcPort: []any{int64(11211)}}}
	})
	require.NoError(t, p.Init())
	var in interval
	in.tables[bpf.ActionDrop] = topk.New(TopTableSize)
	add := func(prefix string, n int, rule int) {
		for i := 0; i < n; i++ {
			in.tables[bpf.ActionDrop].Add(netip.MustParsePrefix(prefix), 100, 17, rule)
		}
	}
	add("203.0.113.0/24", 6, 0)
	add("198.51.100.0/24", 3, -1)
	add("192.0.2.0/24", 1, -1)
	// Two frames without a source (ARP, say), of 60 bytes.
	in.samples[bpf.ActionDrop], in.bytes[bpf.ActionDrop] = 12, 10*100+2*60
	// Counted in the interval: whatever the rate, the cap left fewer samples.
	var counted [bpf.ActionCount]bpf.Counter
	counted[bpf.ActionDrop] = bpf.Counter{Packets: 24_000, Bytes: 2_240_000}
	top := p.sampling.appendTop(nil, "eth1", &in, &counted)
	require.Equal(t, []TopSource{
		{Interface: "eth1", Action: "drop", Rank: 1, Source: "203.0.113.0/24", Packets: 12_000, Bytes: 1_200_000, Share: 0.5, Protocol: "udp", Rule: "reflection"},
		{Interface: "eth1", Action: "drop", Rank: 2, Source: "198.51.100.0/24", Packets: 6000, Bytes: 600_000, Share: 0.25, Protocol: "udp"},
	}, top)
	fields, tags := map[string]any{}, map[string]string{}
	top[1].PutTags(tags)
	top[1].PutFields(fields)
	require.Equal(t, map[string]string{"interface": "eth1", "action": "drop", "rank": "2"}, tags)
	require.Equal(t, map[string]any{"source": "198.51.100.0/24", "packets": uint64(6000), "bytes": uint64(600_000), "share": 0.25, "protocol": "udp"}, fields)
}

func TestSourceAddr(t *testing.T) {
	src4, src6 := netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("2001:db8::9")
	dst4, dst6 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")
	mapped := netip.MustParseAddr("::ffff:203.0.113.9")
	v4 := frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.UDP(4)), src4, dst4)
	v6 := frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(4)), src6, dst6)
	v6mapped := frames.Addressed(frames.IPv6(frames.ProtoUDP, frames.UDP(4)), mapped, dst6)
	for _, c := range []struct {
		name  string
		frame []byte
		want  netip.Addr
	}{
		{"ipv4", frames.Ether(frames.EtherIPv4, v4), src4},
		{"ipv6", frames.Ether(frames.EtherIPv6, v6), src6},
		{"ipv6 under two tags", frames.Ether(frames.EtherIPv6, v6, frames.Tag{TPID: frames.Ether8021AD, VID: 5}, frames.Tag{TPID: frames.Ether8021Q, VID: 6}), src6},
		// An IPv6 frame's source is IPv6, IPv4-mapped or not.
		{"ipv6 from an ipv4-mapped address", frames.Ether(frames.EtherIPv6, v6mapped), mapped},
	} {
		got, ok := sourceAddr(c.frame[:MinTopSnaplen])
		require.True(t, ok, c.name)
		require.Equal(t, c.want, got, c.name)
		_, ok = sourceAddr(c.frame[:len(c.frame)-len(c.frame)+12])
		require.False(t, ok, c.name)
	}
	_, ok := sourceAddr(frames.Ether(frames.EtherARP, frames.ARPRequest()))
	require.False(t, ok)
}

// TestCaptureKeepsFirstErrorAndCounts: a capture that cannot be opened
// counts each interface's frames, reports its first error once, and opens
// at the gather after the obstruction went, saying how many were lost.
func TestCaptureKeepsFirstErrorAndCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	require.NoError(t, os.Mkdir(path, 0o700)) // in the way
	c := newCapture(path, pcapng.Options{MaxSize: pcapng.MinSize, Snaplen: 64, Files: 2})
	failing, report, _ := c.gathered()
	require.ErrorContains(t, report, "is not a regular file but a directory")
	require.Equal(t, report.Error(), failing)
	frame := make([]byte, 60)
	for i := 0; i < 5; i++ {
		c.write([]string{"eth1", "eth2"}[i%2], time.Now(), frame, len(frame))
	}
	failing, report, _ = c.gathered()
	require.NoError(t, report, "reported once")
	require.Contains(t, failing, "is not a regular file but a directory")
	require.Equal(t, uint64(3), c.lostOn("eth1"))
	require.Equal(t, uint64(2), c.lostOn("eth2"))

	require.NoError(t, os.Remove(path))
	failing, report, resumed := c.gathered()
	require.Empty(t, failing)
	require.NoError(t, report)
	require.Equal(t, uint64(5), resumed)
	c.write("eth1", time.Now(), frame, len(frame))
	require.NoError(t, c.err)
	require.Equal(t, uint64(3), c.lostOn("eth1"))
	c.forget("eth1")
	require.Zero(t, c.lostOn("eth1"))
	require.NoError(t, c.close())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.NotZero(t, fi.Size(), "the frame after is written")
}
