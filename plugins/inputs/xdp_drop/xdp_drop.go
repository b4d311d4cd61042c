package xdp_drop

import (
	_ "embed"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/inputs"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/pcapng"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

//go:embed sample.conf
var sampleConfig string

// XDPDrop attaches an XDP drop program to network interfaces and reports
// its per-protocol drop and pass counters.
type XDPDrop struct {
	Interfaces       []string `toml:"interfaces"`
	InterfaceExclude []string `toml:"interface_exclude"`
	Namespace        string   `toml:"namespace"`
	Mode             string   `toml:"mode"`
	Drop             []any    `toml:"drop"`
	DryRun           bool     `toml:"dry_run"`
	Replace          bool     `toml:"replace"`
	PerCPU           bool     `toml:"per_cpu"`
	PerQueue         bool     `toml:"per_queue"`
	PinPath          string   `toml:"pin_path"`
	KeepAttached     bool     `toml:"keep_attached"`
	// HandoverTimeout is how long a stopped instance's attachments wait
	// for a successor to take them over in place; 0 releases at once.
	HandoverTimeout config.Duration `toml:"handover_timeout"`
	// Sampling (sampling.go): which frames go up, and what becomes of them.
	SampleRate         int64       `toml:"sample_rate"`
	SampleActions      []string    `toml:"sample_actions"`
	SampleMaxPerSecond int64       `toml:"sample_max_per_second"`
	TopSources         int64       `toml:"top_sources"`
	TopSourcePrefixV4  int64       `toml:"top_source_prefix_ipv4"`
	TopSourcePrefixV6  int64       `toml:"top_source_prefix_ipv6"`
	CapturePath        string      `toml:"capture_path"`
	CaptureSnaplen     int64       `toml:"capture_snaplen"`
	CaptureMaxSize     config.Size `toml:"capture_max_size"`
	CaptureFiles       int64       `toml:"capture_files"`
	Rules              []Rule      `toml:"rule"`
	// Bans (bans.go): timed bans fed by CrowdSec; nil without the table.
	Bans *BansConfig `toml:"bans"`
	// FlowSpec (flowspec.go): rules BGP peers announce; nil without the table.
	FlowSpec *FlowSpecConfig `toml:"flowspec"`

	Log telegraf.Logger `toml:"-"`
	// Run is what the binary sets for its run; no option of the config.
	Run RunOptions `toml:"-"`

	files prefixLists // the rules fed from prefix files
	// links owns the interfaces and their programs; Init fills it in.
	links links
	// sampling reads the sampled frames, writes the capture and counts the
	// top sources; made by Init.
	sampling *sampling
	// bans owns the timed bans, their feed and detection; nil without
	// [bans]. banOpts are its options as parsed: the allowed prefixes'
	// files, which the plugin reads, and what the points and -check show.
	bans    *bans.Bans
	banOpts *bansSettings
	// flow owns [flowspec]: its options as parsed (nil without the
	// table) and, from Start to Stop, the BGP receiver.
	flow flowSpec
	mu   sync.Mutex // held by Start, Reconcile, Snapshot, Stop and the readers of state
}

// RunOptions are what the binary sets for a run, not options of the config.
type RunOptions struct {
	// HandoverInstance names this instance for handover (the binary sets
	// it from its config file's path): a stopped instance's attachments are
	// taken over only by a successor with the same name and user.
	HandoverInstance string
	// Observe, set by the console view, reads the counters of an interface
	// another running xdp_drop holds from its attached program, read-only,
	// instead of failing to attach; an interface observed once is only
	// ever observed.
	Observe bool
	// ReadOnly, set by -status with Observe, attaches nothing: an interface
	// no instance holds is reported so, and a prefix file that does not
	// read is recorded on its rule rather than failing Init.
	ReadOnly bool
	// Version is the binary's version, set at its build: the CrowdSec LAPI
	// records it from the User-Agent (xdp-drop/<version>) as the bouncer's
	// and the machine's, and it versions the detection's scenario; ""
	// sends "unknown".
	Version string
	// ResolvConf is the resolver file whose nameservers the detection
	// never bans; "" reads the namespace's: /etc/netns/<namespace>/resolv.conf
	// when it exists (ip netns exec mounts it), else /etc/resolv.conf.
	ResolvConf string
}

// DefaultHandoverTimeout is handover_timeout when it is not set.
const DefaultHandoverTimeout = 10 * time.Second

// MaxHandoverTimeout bounds handover_timeout: a reload's successor comes in
// seconds, and an instance stopped for good must not go on dropping for long
// after its agent has gone.
const MaxHandoverTimeout = 10 * time.Minute

// New returns the plugin with its defaults.
func New() *XDPDrop {
	x := &XDPDrop{HandoverTimeout: config.Duration(DefaultHandoverTimeout)}
	x.setSamplingDefaults()
	return x
}

func (*XDPDrop) SampleConfig() string { return sampleConfig }

// Init validates the configuration. It touches no kernel state. It
// reports every option refused, not only the first: each as an
// *OptionError, joined (see Errors).
func (x *XDPDrop) Init() error {
	var errs []error
	fail := func(key string, err error) {
		if err != nil {
			errs = append(errs, optionError(key, err))
		}
	}
	selector, err := x.checkInterfaces()
	fail("interfaces", err)
	x.links.selector = selector
	switch m := bpf.Mode(x.Mode); m {
	case "":
		x.links.mode = bpf.ModeNative
	case bpf.ModeNative, bpf.ModeGeneric, bpf.ModeOffload, bpf.ModeAuto:
		x.links.mode = m
	default:
		fail("mode", fmt.Errorf(`mode = %s is not a mode; use "native" (default), "generic", "offload" or "auto"`, quote.Value(x.Mode)))
	}
	policy, err := parsePolicy(x.Drop, x.Rules, x.Bans != nil || x.FlowSpec != nil)
	errs = append(errs, Errors(err)...)
	policy.DryRun = x.DryRun
	policy.PerQueue = x.PerQueue
	policy.Sample, err = x.parseSampling(x.DryRun)
	fail(leadingOption(err), err)
	if len(policy.Rules) == len(x.Rules) {
		errs = append(errs, Errors(x.files.Load(x.Rules, &policy, x.Run.ReadOnly, x.Log))...)
	}
	errs = append(errs, Errors(x.initBans(&policy))...)
	errs = append(errs, Errors(x.initFlowSpec(&policy))...)
	x.links.policy = policy
	x.links.standing = standingClasses(policy)
	fail("namespace", namespace{name: x.Namespace}.check())
	fail("pin_path", x.checkPinning())
	switch d := time.Duration(x.HandoverTimeout); {
	case d < 0:
		fail("handover_timeout", fmt.Errorf(`handover_timeout = "%s" is negative; use a duration such as "10s", or "0s" to release the interfaces at once on stop`, d))
	case d > MaxHandoverTimeout:
		fail("handover_timeout", fmt.Errorf(`handover_timeout = "%s" is longer than %s: a stopped instance would go on dropping for that long; use a duration such as "10s" (a reload takes seconds), or keep_attached = true with pin_path to keep the program attached while no agent runs`, d, MaxHandoverTimeout))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	x.sampling = samplingOf(x.Log, samplingOptions{
		top: int(x.TopSources), bits4: int(x.TopSourcePrefixV4), bits6: int(x.TopSourcePrefixV6),
		capturePath: x.CapturePath,
		capture:     pcapng.Options{MaxSize: int64(x.CaptureMaxSize), Snaplen: uint32(x.CaptureSnaplen), Files: int(x.CaptureFiles)},
	}, &policy, x.Run.Observe)
	if x.bans.Detecting() {
		x.sampling.detect = x.bans
	}
	x.links.wire(x.Log, linkOptions{
		interfaces: x.Interfaces, pinPath: x.PinPath, keepAttached: x.KeepAttached, replace: x.Replace,
		perQueue: &x.PerQueue, perCPU: &x.PerCPU, handoverTimeout: &x.HandoverTimeout,
	}, x.Namespace, x.Run, &x.files, x.sampling)
	return nil
}

// TrustPrefixFiles makes the plugin read prefix files under the trust
// check for uid (see internal/trust), as the config was read: with raised
// capabilities, whoever may write a prefix file decides what is dropped.
func (x *XDPDrop) TrustPrefixFiles(uid int) {
	x.files.Trust(uid)
}

// maxPath and maxFileName are PATH_MAX and NAME_MAX less the NUL: no
// longer path or name opens, and errors that repeat one stay short.
const (
	maxPath     = 4095
	maxFileName = 255
)

func (x *XDPDrop) checkPinning() error {
	switch {
	case len(x.PinPath) > maxPath:
		return fmt.Errorf("pin_path = %s is %d bytes long; a path has at most %d", quote.Value(x.PinPath), len(x.PinPath), maxPath)
	case x.PinPath != "" && !filepath.IsAbs(x.PinPath):
		return fmt.Errorf("pin_path = %s is not an absolute path; use a directory on the BPF filesystem such as \"/sys/fs/bpf/xdp_drop\"", quote.Value(x.PinPath))
	case x.KeepAttached && x.PinPath == "":
		return errors.New(`keep_attached = true needs pin_path: the attachment is kept by pinning it, e.g. pin_path = "/sys/fs/bpf/xdp_drop"`)
	}
	return nil
}

func init() {
	inputs.Add("xdp_drop", func() telegraf.Input { return New() })
}
