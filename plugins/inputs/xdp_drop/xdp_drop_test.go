package xdp_drop

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/influxdata/telegraf/config"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func TestSampleConfigMatchesTopLevel(t *testing.T) {
	top, err := os.ReadFile("../../../sample.conf")
	require.NoError(t, err)
	require.Equal(t, string(top), (withDefaults(&XDPDrop{})).SampleConfig(), "sample.conf and plugins/inputs/xdp_drop/sample.conf must be the same text")
}

// TestReadmeHasSampleConfig: the plugin's README shows sample.conf whole, as
// Telegraf's READMEs do; the top README links to it and to sample.conf, and
// its minimal and fuller configs are configs Init accepts.
func TestReadmeHasSampleConfig(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "```toml @sample.conf\n"+sampleConfig+"```", "README.md must embed sample.conf verbatim")
	top, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	require.Contains(t, string(top), "](sample.conf)", "the top README links to sample.conf")
	require.Contains(t, string(top), "](plugins/inputs/xdp_drop/README.md#configuration)", "the top README links to the whole config")

	var configs []string
	for _, block := range strings.Split(string(top), "```toml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.HasPrefix(block, "[[inputs.xdp_drop]]\n") {
			configs = append(configs, block)
		}
	}
	require.Len(t, configs, 2, "the top README's minimal and fuller configs")
	for i, c := range configs {
		// Decoded over New's defaults, as the shim does.
		var conf struct {
			Inputs struct {
				XDPDrop []*XDPDrop `toml:"xdp_drop"`
			} `toml:"inputs"`
		}
		conf.Inputs.XDPDrop = []*XDPDrop{New()}
		md, err := toml.Decode(c, &conf)
		require.NoError(t, err, "config %d", i)
		require.Empty(t, md.Undecoded(), "config %d", i)
		require.Len(t, conf.Inputs.XDPDrop, 1, "config %d", i)
		require.NoError(t, conf.Inputs.XDPDrop[0].Init(), "config %d:\n%s", i, c)
	}
}

// TestExecdRestartInsideHandover: the execd snippet, as shipped and as the
// READMEs show it, restarts a binary that exited in order without Telegraf
// asking soon enough for the new one to take the handed-over attachments
// over before the default handover_timeout releases them. startAllowance is
// the binary's start, config to takeover, many times over what it takes.
func TestExecdRestartInsideHandover(t *testing.T) {
	const startAllowance = 3 * time.Second
	snippet, err := os.ReadFile("../../../examples/telegraf.d/xdp_drop.conf")
	require.NoError(t, err)
	var conf struct {
		Inputs struct {
			Execd []struct {
				RestartDelay config.Duration `toml:"restart_delay"`
			} `toml:"execd"`
		} `toml:"inputs"`
	}
	_, err = toml.Decode(string(snippet), &conf)
	require.NoError(t, err)
	require.Len(t, conf.Inputs.Execd, 1)
	delay := time.Duration(conf.Inputs.Execd[0].RestartDelay)
	require.Positive(t, delay, "the snippet sets restart_delay")
	require.LessOrEqual(t, delay+startAllowance, DefaultHandoverTimeout,
		"restart_delay %s plus the binary's start (%s allowed) must end before handover_timeout's default %s releases the attachments", delay, startAllowance, DefaultHandoverTimeout)

	line := fmt.Sprintf("  restart_delay = %q\n", delay.String())
	for _, doc := range []string{"README.md", "../../../README.md", "../../../docs/install.md"} {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		require.Contains(t, string(text), "[[inputs.execd]]\n", doc)
		require.Equal(t, strings.Count(string(text), "  restart_delay = "), strings.Count(string(text), line), "%s shows the snippet's restart_delay", doc)
	}
}

func TestInitValid(t *testing.T) {
	cases := []struct {
		name   string
		plugin *XDPDrop
		mode   bpf.Mode
		policy bpf.Policy
	}{
		{"drop all", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"all"}}), bpf.ModeNative, bpf.Policy{DropAll: true}},
		{"ALL any case", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"ALL"}}), bpf.ModeNative, bpf.Policy{DropAll: true}},
		{"names and numbers", withDefaults(&XDPDrop{Interfaces: []string{"eth1", "eth2"}, Mode: "generic", Drop: []any{"udp", "ICMP", int64(47), "ipv6-icmp", "132"}}),
			bpf.ModeGeneric, bpf.Policy{Protocols: []uint8{17, 1, 47, 58, 132}}},
		{"alias", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Mode: "auto", Drop: []any{"icmpv6"}}), bpf.ModeAuto, bpf.Policy{Protocols: []uint8{58}}},
		{"dry run", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Mode: "offload", Drop: []any{int64(0)}, DryRun: true}), bpf.ModeOffload, bpf.Policy{Protocols: []uint8{0}, DryRun: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.plugin
			require.NoError(t, p.Init())
			require.Equal(t, c.mode, p.links.mode)
			require.Equal(t, c.policy, p.links.policy)
		})
	}
}

// TestInitErrors checks that every bad option is refused with an error that
// names the option and the bad value.
func TestInitErrors(t *testing.T) {
	cases := []struct {
		name   string
		plugin *XDPDrop
		want   []string
	}{
		{"no interfaces", withDefaults(&XDPDrop{Drop: []any{"all"}}), []string{"interfaces is missing"}},
		{"empty name", withDefaults(&XDPDrop{Interfaces: []string{""}, Drop: []any{"all"}}), []string{"interfaces", "empty name"}},
		{"duplicate", withDefaults(&XDPDrop{Interfaces: []string{"eth1", "eth1"}, Drop: []any{"all"}}), []string{"interfaces", `"eth1"`, "twice"}},
		{"name too long", withDefaults(&XDPDrop{Interfaces: []string{"abcdefghijklmnop"}, Drop: []any{"all"}}), []string{"interfaces", `"abcdefghijklmnop"`, "15"}},
		{"name with slash", withDefaults(&XDPDrop{Interfaces: []string{"eth/1"}, Drop: []any{"all"}}), []string{"interfaces", `"eth/1"`, "not a valid"}},
		{"unknown mode", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Mode: "fast", Drop: []any{"all"}}), []string{"mode", `"fast"`, `"native"`, `"generic"`, `"offload"`, `"auto"`}},
		{"mode wrong case", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Mode: "Native", Drop: []any{"all"}}), []string{"mode", `"Native"`}},
		{"no drop", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}}), []string{"drop", "empty", `["all"]`}},
		{"unknown protocol", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"udpp"}}), []string{"drop", `"udpp"`, `did you mean "udp"`}},
		{"icmp6 typo", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"icmp-v6"}}), []string{"drop", `"icmp-v6"`, `"ipv6-icmp"`}},
		{"number too big", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{int64(256)}}), []string{"drop", "256", "0-255"}},
		{"negative number", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{int64(-1)}}), []string{"drop", "-1", "0-255"}},
		{"numeric string too big", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"300"}}), []string{"drop", `"300"`, "0-255"}},
		{"all with others", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"all", "udp"}}), []string{"drop", `"all"`, "alone"}},
		{"others with all", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"udp", "all"}}), []string{"drop", `"all"`, "alone"}},
		{"float", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{1.5}}), []string{"drop", "1.5", "float64"}},
		{"bool", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{true}}), []string{"drop", "true", "bool"}},
		{"bad glob", withDefaults(&XDPDrop{Interfaces: []string{"eth[1"}, Drop: []any{"all"}}), []string{"interfaces", `"eth[1"`, "glob"}},
		{"bad exclude glob", withDefaults(&XDPDrop{Interfaces: []string{"eth*"}, InterfaceExclude: []string{"eth[1"}, Drop: []any{"all"}}), []string{"interface_exclude", `"eth[1"`, "glob"}},
		{"relative namespace path", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Namespace: "run/netns/x", Drop: []any{"all"}}), []string{"namespace", `"run/netns/x"`, "absolute"}},
		{"exclude without pattern", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, InterfaceExclude: []string{"eth2"}, Drop: []any{"all"}}), []string{"interface_exclude", "no glob pattern"}},
		{"named and excluded", withDefaults(&XDPDrop{Interfaces: []string{"eth1", "en*"}, InterfaceExclude: []string{"eth*"}, Drop: []any{"all"}}), []string{"interfaces", `"eth1"`, "interface_exclude"}},
		{"namespace with space", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Namespace: "my ns", Drop: []any{"all"}}), []string{"namespace", `"my ns"`}},
		{"namespace name too long", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Namespace: strings.Repeat("n", 256), Drop: []any{"all"}}), []string{"namespace", "256 bytes long", "at most 255"}},
		{"namespace path too long", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Namespace: "/" + strings.Repeat("n", 4095), Drop: []any{"all"}}), []string{"namespace", "4096 bytes long", "at most 4095"}},
		{"pin_path too long", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, PinPath: "/" + strings.Repeat("p", 4095), Drop: []any{"all"}}), []string{"pin_path", "4096 bytes long", "at most 4095"}},
		{"relative pin_path", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"all"}, PinPath: "bpf/xdp"}), []string{"pin_path", `"bpf/xdp"`, "absolute"}},
		{"keep_attached without pin_path", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"all"}, KeepAttached: true}), []string{"keep_attached", "pin_path"}},
		{"duplicate protocol", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"udp", int64(17)}}), []string{"drop", "udp", "17", "twice"}},
		{"negative handover_timeout", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"all"}, HandoverTimeout: config.Duration(-time.Second)}), []string{"handover_timeout", `"-1s"`, "negative", `"0s"`}},
		{"handover_timeout over 10 minutes", withDefaults(&XDPDrop{Interfaces: []string{"eth1"}, Drop: []any{"all"}, HandoverTimeout: config.Duration(10*time.Minute + time.Second)}),
			[]string{`handover_timeout = "10m1s" is longer than 10m0s`, `"10s"`, "keep_attached = true"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.plugin
			err := p.Init()
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestHandoverTimeoutDefault(t *testing.T) {
	require.Equal(t, config.Duration(10*time.Second), New().HandoverTimeout)
}

// TestHandoverTimeoutBound: handover_timeout is refused past 10 minutes,
// as TOML gives it ("2562047h" is the longest duration Go holds); up to 10
// minutes and "0s" are accepted.
func TestHandoverTimeoutBound(t *testing.T) {
	for value, want := range map[string]string{
		"0s":       "",
		"10m":      "",
		"600s":     "",
		"601s":     `handover_timeout = "10m1s" is longer than 10m0s: a stopped instance would go on dropping for that long`,
		"2562047h": `handover_timeout = "2562047h0m0s" is longer than 10m0s`,
	} {
		p := New()
		_, err := toml.Decode("interfaces = [\"eth1\"]\ndrop = [\"all\"]\nhandover_timeout = \""+value+"\"\n", p)
		require.NoError(t, err)
		err = p.Init()
		if want == "" {
			require.NoError(t, err, value)
			continue
		}
		require.ErrorContains(t, err, want, value)
	}
}

func TestProtocolTags(t *testing.T) {
	for n, want := range map[uint8]string{
		0: "hopopt", 1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 50: "esp", 58: "ipv6-icmp",
		59: "ipv6-nonxt", 89: "ospfigp", 132: "sctp", 61: "61", 146: "146", 253: "253", 255: "255",
	} {
		require.Equal(t, want, protocolTag(n), "protocol %d", n)
	}
	for i := 0; i < 256; i++ {
		tag := protocolTag(uint8(i))
		n, ok := lookupProtocol(tag)
		require.True(t, ok, "tag %q must be accepted in drop lists", tag)
		require.Equal(t, uint8(i), n, "tag %q", tag)
	}
}
