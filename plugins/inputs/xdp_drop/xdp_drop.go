package xdp_drop

import (
	_ "embed"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
	// Bans (bans.go): timed bans fed by CrowdSec; nil without the table.
	Bans *BansConfig `toml:"bans"`

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
	// bans owns the timed bans and their feed; nil without [bans].
	bans *bans
}

// maxIfaceName is IFNAMSIZ less the terminating NUL.
const maxIfaceName = 15

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

	errs = append(errs, Errors(x.initBans())...)
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

// globEscapable are the characters a backslash makes literal in an entry
// of interfaces, as in the glob syntax.
const globEscapable = `*?[]\`

// isPattern reports whether an entry of interfaces holds a glob character
// that no backslash makes literal.
func isPattern(entry string) bool {
	for i := 0; i < len(entry); i++ {
		switch c := entry[i]; {
		case c == '\\' && i+1 < len(entry) && strings.IndexByte(globEscapable, entry[i+1]) >= 0:
			i++
		case c == '*' || c == '?' || c == '[':
			return true
		}
	}
	return false
}

// literalName is the interface an entry without a pattern names: a
// backslash before a glob character makes it literal ('rt\[0\]' names rt[0]).
func literalName(entry string) string {
	var b strings.Builder
	for i := 0; i < len(entry); i++ {
		if entry[i] == '\\' && i+1 < len(entry) && strings.IndexByte(globEscapable, entry[i+1]) >= 0 {
			i++
		}
		b.WriteByte(entry[i])
	}
	return b.String()
}

// hasControl reports whether s holds a NUL or another control character.
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

// tagName is an interface name as line protocol carries it: valid UTF-8
// without control characters, losslessly. Bytes that are not UTF-8, control
// characters (C0, DEL and C1) and the backslash become \xNN; every other
// name is unchanged.
func tagName(name string) string {
	return escapeBytes(name, true)
}

// Printable is a line of text (a log line, an error field) as it may reach
// a terminal: bytes that are not UTF-8 and control characters other than
// tab become \xNN, as in the interface tag, so no escape sequence in an
// interface name or a path acts on the terminal. Backslashes stay, so that
// text quoted with %q is unchanged.
func Printable(line string) string {
	return escapeBytes(line, false)
}

// escapeBytes writes the bytes of s that are not UTF-8, its control
// characters (but tab, unless backslash) and, when backslash is set, its
// backslashes as \xNN.
func escapeBytes(s string, backslash bool) string {
	escape := func(r rune, size int) bool {
		return r == utf8.RuneError && size <= 1 || unicode.IsControl(r) && (r != '\t' || backslash) || backslash && r == '\\'
	}
	clean := true
	for i := 0; i < len(s) && clean; {
		r, size := utf8.DecodeRuneInString(s[i:])
		clean = !escape(r, size)
		i += size
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !escape(r, size) {
			b.WriteString(s[i : i+size])
		} else {
			for j := i; j < i+size; j++ {
				fmt.Fprintf(&b, `\x%02x`, s[j])
			}
		}
		i += size
	}
	return b.String()
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

func (x *XDPDrop) checkInterfaces() error {
	switch {
	case x.Interfaces == nil:
		return errors.New(`interfaces is missing; list the interfaces to attach to, e.g. interfaces = ["eth1"] or ["eth*"] (interfaces = [] attaches to nothing)`)
	case len(x.Interfaces) == 0 && len(x.InterfaceExclude) > 0:
		return errors.New("interface_exclude is set but interfaces is empty; list patterns such as \"eth*\" in interfaces")
	case len(x.Interfaces) == 0:
		// The shipped config's default: nothing attached until edited; Start warns.
		return nil
	}
	seen := make(map[string]bool, len(x.Interfaces))
	var patterns []string
	for _, entry := range x.Interfaces {
		name := entry
		if !isPattern(entry) {
			name = literalName(entry)
		}
		switch {
		case entry == "":
			return errors.New(`interfaces has an empty name; list interface names, e.g. interfaces = ["eth1"]`)
		case hasControl(entry):
			return fmt.Errorf("interfaces: %s holds a NUL or control character, which no interface name can; list names as ip link shows them", Quote(entry))
		case len(name) > maxIfaceName && !isPattern(entry):
			return fmt.Errorf("interfaces: %s is longer than the %d characters an interface name can have", Quote(entry), maxIfaceName)
		case strings.ContainsAny(name, "/ \t\n:") || name == "." || name == "..":
			return fmt.Errorf("interfaces: %s is not a valid interface name", Quote(entry))
		case seen[name]:
			return fmt.Errorf("interfaces: %s is listed twice; list each interface once", Quote(entry))
		}
		seen[name] = true
		if isPattern(entry) {
			patterns = append(patterns, entry)
		}
	}
	for _, p := range patterns {
		if _, err := filter.Compile([]string{p}); err != nil {
			return fmt.Errorf("interfaces: %s is not a valid glob pattern: %v", Quote(p), err)
		}
	}
	for _, p := range x.InterfaceExclude {
		if hasControl(p) {
			return fmt.Errorf("interface_exclude: %s holds a NUL or control character, which no interface name can", Quote(p))
		}
		if _, err := filter.Compile([]string{p}); err != nil {
			return fmt.Errorf("interface_exclude: %s is not a valid glob pattern: %v", Quote(p), err)
		}
	}
	exclude, err := filter.Compile(x.InterfaceExclude)
	if err != nil {
		return fmt.Errorf("interface_exclude: %w", err)
	}
	for _, entry := range x.Interfaces {
		if !isPattern(entry) && exclude != nil && exclude.Match(literalName(entry)) {
			return fmt.Errorf("interfaces: %s is named exactly but also matches interface_exclude; remove one of the two", Quote(entry))
		}
	}
	if len(patterns) == 0 {
		if len(x.InterfaceExclude) > 0 {
			return errors.New("interface_exclude is set but interfaces has no glob pattern to exclude from; use patterns such as \"eth*\"")
		}
		return nil
	}
	x.selector, err = filter.NewIncludeExcludeFilter(patterns, x.InterfaceExclude)
	if err != nil {
		return fmt.Errorf("interfaces: %w", err)
	}
	return nil
}

// parsePolicy turns the drop option and the rules into a policy. With
// rules, drop is optional: frames no rule matches then pass. The policy
// holds every rule, those refused too, unless there are too many; the
// error joins every refusal.
func parsePolicy(drop []any, rules []Rule) (bpf.Policy, error) {
	var p bpf.Policy
	var dropErr error
	if len(drop) > 0 || len(rules) == 0 {
		p, dropErr = ParseDrop(drop)
		dropErr = optionError("drop", dropErr)
	}
	var rulesErr error
	p.Rules, rulesErr = parseRules(rules)
	if len(p.Rules) == 0 {
		p.Rules = nil
	}
	return p, errors.Join(dropErr, rulesErr)
}

// ParseDrop turns the drop option into a policy: ["all"], or IP protocol
// names (keywords and aliases, any case) and numbers, as TOML decodes them
// (string, int64).
func ParseDrop(drop []any) (bpf.Policy, error) {
	const accepted = `use ["all"], or IP protocol names or numbers 0-255 such as ["udp", "icmp", 47]`
	if len(drop) == 0 {
		return bpf.Policy{}, fmt.Errorf("drop is empty; %s (dry_run = true counts without dropping), or give rules", accepted)
	}
	var p bpf.Policy
	seen := make(map[uint8]bool)
	for _, item := range drop {
		var proto uint8
		switch v := item.(type) {
		case string:
			if strings.EqualFold(v, "all") {
				if len(drop) != 1 {
					return bpf.Policy{}, errors.New(`drop: "all" must stand alone; use ["all"], or list protocols without it`)
				}
				return bpf.Policy{DropAll: true}, nil
			}
			n, ok := lookupProtocol(v)
			if !ok {
				return bpf.Policy{}, fmt.Errorf("drop: %s is not an IP protocol name; %s%s", Quote(v), accepted, suggest(v))
			}
			proto = n
		case int64:
			if v < 0 || v > 255 {
				return bpf.Policy{}, fmt.Errorf("drop: %d is out of range; IP protocol numbers are 0-255", v)
			}
			proto = uint8(v)
		default:
			return bpf.Policy{}, fmt.Errorf("drop: %s (%T) is neither a protocol name nor a number; %s", quoteAny(item), item, accepted)
		}
		if seen[proto] {
			return bpf.Policy{}, fmt.Errorf("drop: protocol %s (%d) is listed twice", protocolTag(proto), proto)
		}
		seen[proto] = true
		p.Protocols = append(p.Protocols, proto)
	}
	return p, nil
}

// suggest names a keyword close to a mistyped protocol name.
func suggest(name string) string {
	l := strings.ToLower(name)
	for _, k := range []string{"icmp", "udp", "tcp", "sctp", "gre", "esp"} {
		if strings.Contains(l, k) && l != k {
			if k == "icmp" && strings.Contains(l, "6") {
				return `; did you mean "ipv6-icmp"?`
			}
			return fmt.Sprintf("; did you mean %q?", k)
		}
	}
	if _, err := strconv.Atoi(name); err == nil {
		return "; numbers are 0-255"
	}
	return ""
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
