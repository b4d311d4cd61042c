//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/plugins/parsers/influx"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xdp-drop-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "telegraf-xdp-drop")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the binary:", err)
		os.Exit(1)
	}
	// The handover sockets of the binaries run as root go in a directory of
	// these tests, whatever the host has in /run or /tmp: RUNTIME_DIRECTORY
	// comes first (runs as another user, which may not write to it, set
	// their own or fall back past it).
	os.Setenv("RUNTIME_DIRECTORY", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "xdp_drop.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// proc is the binary running in a test namespace, gathering on stdin.
// proc is the binary started by binarytest.Start, under the names these
// tests read it by.
type proc struct {
	run    *binarytest.Proc
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  <-chan string
	stderr *binarytest.Buffer
	done   <-chan struct{} // closed when the process has exited
}

// wait returns the exit status; a process still running after testns.Hang
// is hung and fails the test.
func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.run.Err()
	case <-time.After(testns.Hang):
		t.Fatalf("still running after %v; stderr: %s", testns.Hang, p.stderr)
		return nil
	}
}

// requireDetached asserts the outcome of a stop or a kill: the test veth
// has no XDP program. How fast is for make bench to measure; only a hang
// fails here.
func requireDetached(t *testing.T, ns *testns.NS, after string) {
	t.Helper()
	_, err := ns.WaitNoXDP(testns.Dev, testns.Hang)
	require.NoError(t, err, "after %s", after)
}

func start(t *testing.T, ns *testns.NS, config string) *proc {
	t.Helper()
	return startWith(t, ns, config, "-poll_interval_disabled")
}

// startAt writes config to the file path and starts the binary with it: a
// successor runs the config file of the instance it follows.
func startAt(t *testing.T, ns *testns.NS, path, config string) *proc {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	return startConfigFile(t, ns, path)
}

// startHereAt is startAt for startHere.
func startHereAt(t *testing.T, ns *testns.NS, path, config string) *proc {
	t.Helper()
	require.Contains(t, config, fmt.Sprintf("namespace = %q", ns.Name), "the binary must attach in the test namespace only")
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	return runProc(t, exec.Command(binary, "-config", path, "-poll_interval_disabled"))
}

// startWith starts the binary with the config and flags.
func startWith(t *testing.T, ns *testns.NS, config string, flags ...string) *proc {
	t.Helper()
	// The binary attaches to whatever the config names in its namespace:
	// only this test's devices are allowed there.
	require.NoError(t, ns.Do(func() error {
		for _, name := range []string{testns.Dev, testns.Peer} {
			if err := ns.CheckAttachable(name); err != nil {
				return err
			}
		}
		return nil
	}))
	return runProc(t, ns.Exec(binary, append([]string{"-config", writeConfig(t, config)}, flags...)...))
}

// startHere runs the binary in this process's namespaces, for a config
// whose namespace option names the test namespace.
func startHere(t *testing.T, ns *testns.NS, config string) *proc {
	t.Helper()
	require.Contains(t, config, fmt.Sprintf("namespace = %q", ns.Name), "the binary must attach in the test namespace only")
	require.NoError(t, ns.Do(func() error {
		for _, name := range []string{testns.Dev, testns.Peer} {
			if err := ns.CheckAttachable(name); err != nil {
				return err
			}
		}
		return nil
	}))
	return runProc(t, exec.Command(binary, "-config", writeConfig(t, config), "-poll_interval_disabled"))
}

func runProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	r := binarytest.Start(t, cmd, 1024)
	return &proc{run: r, cmd: r.Cmd, stdin: r.Stdin, lines: r.Lines, stderr: r.Stderr, done: r.Done}
}

// gather asks for one gather and parses the points it prints, up to and
// including the xdp_drop_link point of the last interface.
func (p *proc) gather(t *testing.T, lastIface string) []telegraf.Metric {
	t.Helper()
	_, err := io.WriteString(p.stdin, "\n")
	require.NoError(t, err)
	return p.read(t, lastIface)
}

// read parses the points of the next gather the binary prints, up to and
// including the xdp_drop_link point of the last interface.
func (p *proc) read(t *testing.T, lastIface string) []telegraf.Metric {
	t.Helper()
	parser := &influx.Parser{}
	require.NoError(t, parser.Init())
	var out []telegraf.Metric
	timeout := time.After(testns.Hang)
	for {
		select {
		case line, ok := <-p.lines:
			require.True(t, ok, "stdout closed; stderr: %s", p.stderr)
			m, err := parser.ParseLine(line)
			require.NoError(t, err, "line %q", line)
			out = append(out, m)
			if iface, _ := m.GetTag("interface"); m.Name() == "xdp_drop_link" && iface == lastIface {
				return out
			}
		case <-timeout:
			t.Fatalf("no xdp_drop_link point for %s within %v; stderr: %s", lastIface, testns.Hang, p.stderr)
		}
	}
}

func waitAttached(t *testing.T, ns *testns.NS, iface string) uint32 {
	t.Helper()
	deadline := time.Now().Add(testns.Hang)
	for time.Now().Before(deadline) {
		id, err := ns.XDPProgramID(iface)
		require.NoError(t, err)
		if id != 0 {
			return id
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s has no XDP program after %v", iface, testns.Hang)
	return 0
}

type key struct{ iface, family, protocol, action string }

func counts(ms []telegraf.Metric) (map[key][2]int64, int64) {
	out := map[key][2]int64{}
	var total int64
	for _, m := range ms {
		if m.Name() != "xdp_drop" {
			continue
		}
		tags := m.Tags()
		p, _ := m.GetField("packets")
		b, _ := m.GetField("bytes")
		if p.(int64) == 0 {
			continue // a standing series no frame reached
		}
		out[key{tags["interface"], tags["family"], tags["protocol"], tags["action"]}] = [2]int64{p.(int64), b.(int64)}
		total += p.(int64)
	}
	return out, total
}

// TestBinaryEndToEnd runs the built binary on a veth, sends a mix, reads the
// line protocol it prints and checks exact counts; then closes stdin and
// checks the interface is left without XDP and the exit code is 0
// (handover_timeout = "0s": no successor is waited for).
func TestBinaryEndToEnd(t *testing.T) {
	ns := testns.New(t)
	p := start(t, ns, fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = [%q]
  drop = ["udp", "ipv6-icmp", 47]
  handover_timeout = "0s"
`, testns.Dev))
	id := waitAttached(t, ns, testns.Dev)

	mix := traffic.Mix()
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.SendFlows(ns.PeerIdx, mix) }))

	var got map[key][2]int64
	var ms []telegraf.Metric
	for deadline := time.Now().Add(testns.Hang); ; {
		ms = p.gather(t, testns.Dev)
		var total int64
		got, total = counts(ms)
		if total >= int64(traffic.Total(mix)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := map[key][2]int64{}
	for i, c := range traffic.Expected(mix) {
		if c.Packets == 0 {
			continue
		}
		class := bpf.Class(i)
		action := "pass"
		if proto, ok := class.Protocol(); ok && (proto == 17 || proto == 58 || proto == 47) {
			action = "drop"
		}
		name := class.Name()
		if proto, ok := class.Protocol(); ok {
			name = map[uint8]string{6: "tcp", 17: "udp", 1: "icmp", 58: "ipv6-icmp", 47: "gre"}[proto]
		}
		want[key{testns.Dev, class.Family().String(), name, action}] = [2]int64{int64(c.Packets), int64(c.Bytes)}
	}
	require.Equal(t, want, got)

	link := ms[len(ms)-1]
	require.Equal(t, "xdp_drop_link", link.Name())
	require.Equal(t, map[string]string{"interface": testns.Dev, "mode": "native"}, link.Tags())
	require.Equal(t, map[string]any{"attached": true, "program_id": int64(id), "fallback": false}, link.Fields())

	require.NoError(t, p.stdin.Close())
	requireDetached(t, ns, "stdin closed")
	require.NoError(t, p.wait(t), "exit status; stderr: %s", p.stderr)
	for _, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		require.Regexp(t, `^[EWID]! [^0-9]`, line, "every log line starts with a level prefix and no timestamp")
		require.False(t, strings.HasPrefix(line, "E! "), "no error in a clean run: %s", line)
	}
	require.Contains(t, p.stderr.String(), fmt.Sprintf(`I! interface %q: attached in native mode, program id %d`, testns.Dev, id))
}

// TestBinaryDetachesOnSignals: SIGKILL leaves nothing attached (bpf_link),
// whatever handover_timeout says: no handover process is started; with
// handover_timeout = "0s", SIGTERM and SIGINT detach and exit 0.
func TestBinaryDetachesOnSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ns := testns.New(t)
			timeout := "0s"
			if sig == syscall.SIGKILL {
				timeout = "10s"
			}
			p := start(t, ns, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"all\"]\n  handover_timeout = %q\n", testns.Dev, timeout))
			waitAttached(t, ns, testns.Dev)
			p.gather(t, testns.Dev)
			require.NoError(t, p.cmd.Process.Signal(sig))
			requireDetached(t, ns, sig.String())
			err := p.wait(t)
			if sig == syscall.SIGKILL {
				require.Error(t, err)
				return
			}
			require.NoError(t, err, "exit status after %v; stderr: %s", sig, p.stderr)
		})
	}
}

// TestBadConfigs: each bad config exits non-zero with one error line that
// names the problem, before anything is attached.
func TestBadConfigs(t *testing.T) {
	cases := []struct {
		name, config string
		want         []string
	}{
		{"missing interfaces", "[[inputs.xdp_drop]]\ndrop = [\"all\"]\n", []string{"interfaces is missing", "interfaces = [] attaches to nothing"}},
		{"duplicate interface", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\", \"a0\"]\ndrop = [\"all\"]\n", []string{"interfaces", `"a0"`, "twice"}},
		{"unknown mode", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\nmode = \"turbo\"\ndrop = [\"all\"]\n", []string{"mode", `"turbo"`, `"generic"`}},
		{"unknown protocol", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"udp\", \"quic\"]\n", []string{"drop", `"quic"`, "0-255"}},
		{"number out of range", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [300]\n", []string{"drop", "300", "0-255"}},
		{"all mixed", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\", \"tcp\"]\n", []string{"drop", `"all"`, "alone"}},
		{"missing drop", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\n", []string{"drop is empty"}},
		{"unknown key", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\"]\ndryrun = true\n", []string{"unknown option", "dryrun", "dry_run"}},
		{"unknown key in a rule", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\n[[inputs.xdp_drop.rule]]\nname = \"a\"\naction = \"drop\"\nprotocol = [\"udp\"]\n[[inputs.xdp_drop.rule]]\nname = \"dns\"\naction = \"pass\"\nprotocol = [\"udp\"]\ndport = [53]\n",
			[]string{`rule "dns"`, `unknown key "dport"`, "dst_port"}},
		{"key in another case", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\nDROP = [\"all\"]\n", []string{`unknown option "inputs.xdp_drop.DROP"`, "case-sensitive", `did you mean "drop"?`}},
		{"bad rule", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\n[[inputs.xdp_drop.rule]]\nname = \"net\"\naction = \"drop\"\nsrc_prefix = [\"10.0.0.1/8\"]\n",
			[]string{`rule "net"`, "src_prefix", `did you mean "10.0.0.0/8"`}},
		{"unknown section", "[agent]\ninterval = \"10s\"\n[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\"]\n", []string{"unknown section or key", `"agent"`, "Telegraf's config"}},
		{"other plugin", "[[inputs.cpu]]\n", []string{"[[inputs.cpu]]", "only [[inputs.xdp_drop]]"}},
		{"two sections", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\"]\n[[inputs.xdp_drop]]\ninterfaces = [\"a1\"]\ndrop = [\"all\"]\n", []string{"2 [[inputs.xdp_drop]] sections"}},
		{"no section", "# nothing\n", []string{"no [[inputs.xdp_drop]] section"}},
		{"wrong type", "[[inputs.xdp_drop]]\ninterfaces = \"a0\"\ndrop = [\"all\"]\n", []string{"inputs.xdp_drop.interfaces", "incompatible types"}},
		{"wrong type bool", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\"]\ndry_run = \"yes\"\n", []string{"inputs.xdp_drop.dry_run", "incompatible types"}},
		{"name too long", "[[inputs.xdp_drop]]\ninterfaces = [\"averyveryverylongname\"]\ndrop = [\"all\"]\n", []string{"interfaces", "longer than the 15"}},
		{"bad handover_timeout", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\"]\nhandover_timeout = \"soon\"\n", []string{"handover_timeout", "soon"}},
		{"negative handover_timeout", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"]\ndrop = [\"all\"]\nhandover_timeout = \"-5s\"\n", []string{"handover_timeout", `"-5s"`, "negative"}},
		{"malformed toml", "[[inputs.xdp_drop]]\ninterfaces = [\"a0\"\ndrop = [\"all\"]\n", []string{"line 3", "expected a comma"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command(binary, "-config", writeConfig(t, c.config)).CombinedOutput()
			require.Error(t, err)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.NotZero(t, exit.ExitCode())
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Len(t, lines, 1, "one line: %s", out)
			require.True(t, strings.HasPrefix(lines[0], "E! "), lines[0])
			for _, w := range c.want {
				require.Contains(t, lines[0], w)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		out, err := exec.Command(binary, "-config", "/nonexistent/xdp_drop.conf").CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "E! config: open /nonexistent/xdp_drop.conf: no such file or directory")
	})
	t.Run("no config flag", func(t *testing.T) {
		out, err := exec.Command(binary).CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "E! -config is required")
	})
}
