package xdp_drop

import (
	"errors"
	"fmt"
	"slices"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/pcapng"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Defaults of the sampling options.
const (
	DefaultSampleMaxPerSecond = 10_000
	DefaultTopSources         = 10
	DefaultTopPrefixV4        = 24
	DefaultTopPrefixV6        = 64
	DefaultCaptureSnaplen     = 128
	DefaultCaptureMaxSize     = 64 << 20
	DefaultCaptureFiles       = 2
)

// Bounds of the sampling options.
const (
	MaxSampleMaxPerSecond = 1_000_000
	MaxTopSources         = 100
	// TopTableSize is how many sources an interface's action keeps count
	// of between gathers: the memory is fixed, and a share is off by at
	// most 1/TopTableSize of the samples.
	TopTableSize = 1024
)

// setSamplingDefaults sets the sampling options' defaults.
func (s *XDPDrop) setSamplingDefaults() {
	s.SampleMaxPerSecond = DefaultSampleMaxPerSecond
	s.TopSources = DefaultTopSources
	s.TopSourcePrefixV4 = DefaultTopPrefixV4
	s.TopSourcePrefixV6 = DefaultTopPrefixV6
	s.CaptureSnaplen = DefaultCaptureSnaplen
	s.CaptureMaxSize = DefaultCaptureMaxSize
	s.CaptureFiles = DefaultCaptureFiles
}

// parseSampling checks the sampling options and returns what the program
// is loaded with; dryRun says whether drops are would_drop.
func (s *XDPDrop) parseSampling(dryRun bool) (bpf.Sampling, error) {
	var out bpf.Sampling
	switch {
	case s.SampleRate < 0 || s.SampleRate > bpf.SampleRateMax:
		return out, fmt.Errorf("sample_rate = %d is out of range; use 0 (off) or 1 in N frames with N up to %d, e.g. sample_rate = 1000", s.SampleRate, bpf.SampleRateMax)
	case s.SampleMaxPerSecond < 1 || s.SampleMaxPerSecond > MaxSampleMaxPerSecond:
		return out, fmt.Errorf("sample_max_per_second = %d is out of range; use 1 to %d (default %d)", s.SampleMaxPerSecond, MaxSampleMaxPerSecond, DefaultSampleMaxPerSecond)
	case s.TopSources < 0 || s.TopSources > MaxTopSources:
		return out, fmt.Errorf("top_sources = %d is out of range; use 0 (no xdp_drop_top) to %d (default %d)", s.TopSources, MaxTopSources, DefaultTopSources)
	case s.TopSourcePrefixV4 < 1 || s.TopSourcePrefixV4 > 32:
		return out, fmt.Errorf("top_source_prefix_ipv4 = %d is not a prefix length; use 1 to 32 (default %d; 32 for single addresses)", s.TopSourcePrefixV4, DefaultTopPrefixV4)
	case s.TopSourcePrefixV6 < 1 || s.TopSourcePrefixV6 > 128:
		return out, fmt.Errorf("top_source_prefix_ipv6 = %d is not a prefix length; use 1 to 128 (default %d)", s.TopSourcePrefixV6, DefaultTopPrefixV6)
	case s.CaptureSnaplen < 1 || s.CaptureSnaplen > int64(bpf.SnaplenMax):
		return out, fmt.Errorf("capture_snaplen = %d is out of range; use 1 to %d bytes (default %d)", s.CaptureSnaplen, bpf.SnaplenMax, DefaultCaptureSnaplen)
	case s.CaptureMaxSize < pcapng.MinSize:
		return out, fmt.Errorf(`capture_max_size = %d bytes is below the least, %d (64KiB); use a size such as "64MiB"`, s.CaptureMaxSize, pcapng.MinSize)
	case s.CaptureFiles < 1 || s.CaptureFiles > pcapng.MaxFiles:
		return out, fmt.Errorf("capture_files = %d is out of range; use 1 to %d rotated files kept beside the capture (default %d)", s.CaptureFiles, pcapng.MaxFiles, DefaultCaptureFiles)
	case s.TopSources > 0 && s.CaptureSnaplen < MinTopSnaplen:
		return out, fmt.Errorf("capture_snaplen = %d is too short for top_sources, which reads source addresses up to byte %d (an IPv6 frame under two VLAN tags); use at least %d, or top_sources = 0", s.CaptureSnaplen, MinTopSnaplen, MinTopSnaplen)
	}
	if s.SampleRate == 0 {
		// Off: an option of sampling set to anything but its default does nothing.
		return out, s.unusedSampling()
	}
	if s.CapturePath != "" {
		if len(s.CapturePath) > maxPath {
			return out, fmt.Errorf("capture_path = %s is %d bytes long; a path has at most %d", quote.Value(s.CapturePath), len(s.CapturePath), maxPath)
		}
		if err := pcapng.CheckPath(s.CapturePath); err != nil {
			return out, fmt.Errorf("capture_path = %s %w", quote.Value(s.CapturePath), err)
		}
	}
	actions, err := sampleActions(s.SampleActions, dryRun)
	if err != nil {
		return out, err
	}
	return bpf.Sampling{
		Rate: uint32(s.SampleRate), Actions: actions,
		MaxPerSecond: uint32(s.SampleMaxPerSecond), Snaplen: uint32(s.CaptureSnaplen),
	}, nil
}

// unusedSampling names a sampling option set, to anything but its default,
// while sample_rate = 0 turns sampling off.
func (s *XDPDrop) unusedSampling() error {
	const fix = "set sample_rate, e.g. sample_rate = 1000, or remove the option"
	switch {
	case s.CapturePath != "":
		return fmt.Errorf("capture_path = %s needs sample_rate: the capture holds sampled frames; set sample_rate, e.g. sample_rate = 1000", quote.Value(s.CapturePath))
	case s.SampleActions != nil:
		return errors.New("sample_actions is set but sample_rate is 0 (off); set sample_rate, e.g. sample_rate = 1000")
	case s.SampleMaxPerSecond != DefaultSampleMaxPerSecond:
		return fmt.Errorf("sample_max_per_second = %d has no effect with sample_rate = 0 (off); %s", s.SampleMaxPerSecond, fix)
	case s.TopSources != DefaultTopSources:
		return fmt.Errorf("top_sources = %d has no effect with sample_rate = 0 (off); %s", s.TopSources, fix)
	case s.TopSourcePrefixV4 != DefaultTopPrefixV4:
		return fmt.Errorf("top_source_prefix_ipv4 = %d has no effect with sample_rate = 0 (off); %s", s.TopSourcePrefixV4, fix)
	case s.TopSourcePrefixV6 != DefaultTopPrefixV6:
		return fmt.Errorf("top_source_prefix_ipv6 = %d has no effect with sample_rate = 0 (off); %s", s.TopSourcePrefixV6, fix)
	case s.CaptureSnaplen != DefaultCaptureSnaplen:
		return fmt.Errorf("capture_snaplen = %d has no effect with sample_rate = 0 (off); %s", s.CaptureSnaplen, fix)
	case s.CaptureMaxSize != DefaultCaptureMaxSize:
		return fmt.Errorf("capture_max_size = %d bytes has no effect with sample_rate = 0 (off); %s", s.CaptureMaxSize, fix)
	case s.CaptureFiles != DefaultCaptureFiles:
		return fmt.Errorf("capture_files = %d has no effect with sample_rate = 0 (off); %s", s.CaptureFiles, fix)
	}
	return nil
}

// sampleActions turns sample_actions into the actions sampled: the frames
// dropped (would_drop in a dry run) when it is not set.
func sampleActions(names []string, dryRun bool) ([bpf.ActionCount]bool, error) {
	var a [bpf.ActionCount]bool
	if names == nil {
		a[bpf.ActionDrop] = true
		return a, nil
	}
	if len(names) == 0 {
		return a, errors.New(`sample_actions is empty; list "drop", "pass" or "would_drop", or leave it out to sample the dropped frames`)
	}
	for i, n := range names {
		var act bpf.Action
		switch {
		case n == ActionPass:
			act = bpf.ActionPass
		case n == ActionDrop && dryRun:
			return a, errors.New(`sample_actions: "drop" never happens in a dry run (dry_run = true): sample "would_drop" instead`)
		case n == ActionWouldDrop && !dryRun:
			return a, errors.New(`sample_actions: "would_drop" happens only in a dry run (dry_run = true): sample "drop" instead`)
		case n == ActionDrop || n == ActionWouldDrop:
			act = bpf.ActionDrop
		default:
			return a, fmt.Errorf(`sample_actions: %s is not an action; use "drop", "pass" or "would_drop"`, quote.Value(n))
		}
		if slices.Contains(names[:i], n) {
			return a, fmt.Errorf("sample_actions: %s is listed twice", quote.Value(n))
		}
		a[act] = true
	}
	return a, nil
}

// MinTopSnaplen is the least capture_snaplen with which top_sources can
// read a source address: that of an IPv6 frame under two VLAN tags ends there.
const MinTopSnaplen = 14 + 2*4 + 8 + 16 // Ethernet, two tags, IPv6 to the end of its source

// sampling owns what sample_rate turns on, for every interface: the
// reader of each program's sampled frames (sampler_linux.go), the capture
// they are written to (capture.go) and the top sources they become
// (topsources.go). The plugin makes it in Init; links wires the interfaces to it.
type sampling struct {
	// detect takes each interface's sampled passed frames (bans.detect);
	// nil without a detection.
	detect       *bans.Bans
	on           bool // sample_rate is set
	top          int  // top_sources
	bits4, bits6 int  // top_source_prefix_ipv4, _ipv6
	dryRun       bool
	rules        []string // the rules' names, by index
	log          telegraf.Logger

	capturePath string // "" for none
	captureOpts pcapng.Options
	capture     *capture // the pcapng file of sampled frames, nil while not open
	captureErr  string   // why the capture fails, as the last check found
}

// samplingOptions are the options of the config the sampling follows.
type samplingOptions struct {
	top          int // top_sources
	bits4, bits6 int // top_source_prefix_ipv4, _ipv6
	capturePath  string
	capture      pcapng.Options
}

// samplingOf is the sampling of a policy and the sampling options; a
// console view beside a running instance (observe) writes no capture.
func samplingOf(log telegraf.Logger, o samplingOptions, policy *bpf.Policy, observe bool) *sampling {
	s := &sampling{
		on: policy.Sample.On(), top: o.top, bits4: o.bits4, bits6: o.bits6,
		dryRun: policy.DryRun, log: log, captureOpts: o.capture,
	}
	if !observe {
		s.capturePath = o.capturePath
	}
	for _, r := range policy.Rules {
		s.rules = append(s.rules, r.Name)
	}
	return s
}
