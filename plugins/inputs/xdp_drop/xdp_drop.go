package xdp_drop

import (
	_ "embed"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/filter"
	"github.com/influxdata/telegraf/plugins/inputs"

	"github.com/xdp-drop/xdp_drop/bpf"
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

	// HandoverInstance names this instance for handover (the binary sets
	// it from its config file's path): a stopped instance's attachments are
	// taken over only by a successor with the same name and user.
	HandoverInstance string `toml:"-"`

	Log telegraf.Logger `toml:"-"`
	// Observe, set by the console view, reads the counters of an interface
	// another running xdp_drop holds from its attached program, read-only,
	// instead of failing to attach; an interface observed once is only
	// ever observed. Not an option of the config.
	Observe bool `toml:"-"`
	// ReadOnly, set by -status with Observe, attaches nothing: an interface
	// no instance holds is reported so, and a prefix file that does not
	// read is recorded on its rule rather than failing Init.
	ReadOnly bool `toml:"-"`

	mode   bpf.Mode
	policy bpf.Policy
	files  prefixLists // the rules fed from prefix files
	// kernel is the policy's kernel side (Linux): created at the first
	// attach of each generation of prefix files, closed by Stop.
	kernel kernelSide
	// selector matches the glob patterns of interfaces less
	// interface_exclude; nil when every interface is named exactly.
	selector filter.Filter

	// handoff hands the interfaces over on stop and takes them over at
	// attach (handover_linux.go); made by Init.
	handoff *handoff

	mu          sync.Mutex
	ifaces      []*iface
	nsReported  string          // the namespace error last reported, when no interface carries it
	literalHint map[string]bool // patterns already warned about an interface named like them
	lastSeries  int             // series in the last snapshot
	gathers     uint64          // reconciles done: the number of the current gather
	// released holds what the programs the last Reconcile released
	// counted, for the Snapshot that follows.
	released Snapshot
	// standing are the series emitted at every gather from attach, also at
	// zero (standingClasses).
	standing standingSet

	// sampling reads the sampled frames, writes the capture and counts the
	// top sources; made by Init.
	sampling *sampling
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
	fail("interfaces", x.checkInterfaces())
	switch m := bpf.Mode(x.Mode); m {
	case "":
		x.mode = bpf.ModeNative
	case bpf.ModeNative, bpf.ModeGeneric, bpf.ModeOffload, bpf.ModeAuto:
		x.mode = m
	default:
		fail("mode", fmt.Errorf(`mode = %s is not a mode; use "native" (default), "generic", "offload" or "auto"`, Quote(x.Mode)))
	}
	policy, err := parsePolicy(x.Drop, x.Rules)
	errs = append(errs, Errors(err)...)
	policy.DryRun = x.DryRun
	policy.PerQueue = x.PerQueue
	policy.Sample, err = x.parseSampling(x.DryRun)
	fail(leadingOption(err), err)
	x.policy = policy
	x.standing = standingClasses(policy)
	if len(policy.Rules) == len(x.Rules) {
		errs = append(errs, Errors(x.files.Load(x.Rules, &x.policy, x.ReadOnly, x.Log))...)
	}

	fail("namespace", x.checkNamespace())
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
	x.handoff = handoffOf(x.HandoverInstance)
	x.sampling = samplingOf(x, &x.policy, x.Observe)

	x.ifaces = nil
	for _, name := range x.Interfaces {
		if !isPattern(name) {
			x.ifaces = append(x.ifaces, &iface{name: literalName(name)})
		}
	}
	return nil
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
		return fmt.Errorf("pin_path = %s is %d bytes long; a path has at most %d", Quote(x.PinPath), len(x.PinPath), maxPath)
	case x.PinPath != "" && !filepath.IsAbs(x.PinPath):
		return fmt.Errorf("pin_path = %s is not an absolute path; use a directory on the BPF filesystem such as \"/sys/fs/bpf/xdp_drop\"", Quote(x.PinPath))
	case x.KeepAttached && x.PinPath == "":
		return errors.New(`keep_attached = true needs pin_path: the attachment is kept by pinning it, e.g. pin_path = "/sys/fs/bpf/xdp_drop"`)
	}
	return nil
}

func (x *XDPDrop) checkNamespace() error {
	switch {
	case x.Namespace == "":
		return nil
	case len(x.Namespace) > maxPath:
		return fmt.Errorf("namespace = %s is %d bytes long; a path has at most %d", Quote(x.Namespace), len(x.Namespace), maxPath)
	case !strings.Contains(x.Namespace, "/") && len(x.Namespace) > maxFileName:
		return fmt.Errorf("namespace = %s is %d bytes long; a name in /var/run/netns has at most %d", Quote(x.Namespace), len(x.Namespace), maxFileName)
	case strings.ContainsAny(x.Namespace, " \t\n"):
		return fmt.Errorf("namespace = %s: not a namespace name or path; use a name from /var/run/netns or a path such as /proc/1234/ns/net", Quote(x.Namespace))
	case strings.Contains(x.Namespace, "/") && !filepath.IsAbs(x.Namespace):
		return fmt.Errorf("namespace = %s: a path must be absolute, such as /proc/1234/ns/net; a name has no '/'", Quote(x.Namespace))
	case x.Namespace == "." || x.Namespace == "..":
		return fmt.Errorf("namespace = %s: not a namespace name", Quote(x.Namespace))
	}
	return x.checkNamespaceEntry()
}

func init() {
	inputs.Add("xdp_drop", func() telegraf.Input { return New() })
}

// refreshPrefixFiles puts in force the prefixes of the prefix files that
// changed since the last gather (prefixLists.Refresh).
func (x *XDPDrop) refreshPrefixFiles(acc telegraf.Accumulator) {
	if next, changed := x.files.Refresh(acc, x.policy); changed {
		x.policy = next
	}
}
