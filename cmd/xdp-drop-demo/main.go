//go:build linux

// Command demo shows xdp_drop at work without touching this machine's own
// network: it makes a network namespace with a veth pair, runs the real
// plugin binary attached to one end with a sample policy, sends a mix of
// traffic from the other end and prints the line protocol of a few gathers.
// It cleans up on exit and on Ctrl-C.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

const config = `# The demo's policy: drop UDP and ICMP (v4 and v6), pass and count the rest;
# two rules, checked first, decide some frames against it; the heaviest sources of
# what is dropped are sampled.
[[inputs.xdp_drop]]
  interfaces = ["%s"]
  drop = ["udp", "icmp", "ipv6-icmp"]
  ## No successor comes: release the interface at once on stop.
  handover_timeout = "0s"
  ## Sample 1 in 4 dropped frames and report the 3 heaviest sources.
  sample_rate = 4
  top_sources = 3

  ## Pass IPv6 UDP from the documentation prefix, which the policy drops.
  [[inputs.xdp_drop.rule]]
    name = "udp6-from-db8"
    action = "pass"
    protocol = ["udp"]
    src_prefix = ["2001:db8::/32"]

  ## Drop TCP to the discard port, which the policy passes.
  [[inputs.xdp_drop.rule]]
    name = "tcp-discard"
    action = "drop"
    protocol = ["tcp"]
    dst_port = [9]
`

const gathers = 3

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: the demo creates a network namespace and attaches XDP (sudo make demo)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "xdp-drop-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	binary := filepath.Join(dir, "telegraf-xdp-drop")
	status("building %s", "./cmd/telegraf-xdp-drop")
	build := exec.Command("go", "build", "-o", binary, "./cmd/telegraf-xdp-drop")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the plugin binary: %w", err)
	}

	ns, err := createNamespace()
	if err != nil {
		return fmt.Errorf("create network namespace: %w", err)
	}
	defer func() {
		if err := ns.Delete(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: delete namespace:", err)
		}
		status("deleted namespace %s", ns.Name)
	}()
	status("namespace %s: veth %s (XDP attached here) <-> %s (traffic sent from here)", ns.Name, testns.Dev, testns.Peer)
	if err := ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }); err != nil {
		return err
	}

	confPath := filepath.Join(dir, "xdp_drop.conf")
	// testns.Dev is a plain name of the demo's own: no TOML escaping is needed.
	conf := fmt.Sprintf(config, testns.Dev)
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return err
	}
	status("config:\n%s", indent(conf))

	cmd := ns.Exec(binary, "-config", confPath, "-poll_interval_disabled")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = prefixWriter{os.Stderr}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the plugin: %w", err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		stdin.Close() // the plugin detaches and exits on stdin EOF
		select {
		case err := <-exited:
			status("plugin exited (%v); %s has no XDP program: %v", exitText(err), testns.Dev, noXDP(ns))
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
	}()

	if err := waitAttached(ctx, ns); err != nil {
		return err
	}
	gen, err := txgen.New()
	if err != nil {
		return err
	}
	defer gen.Close()

	mix := traffic.Mix()
	for g := 1; g <= gathers; g++ {
		status("sending %d frames from %s (%s): %s", traffic.Total(mix), testns.Peer, transportText(gen.Transport()), flowNames(mix))
		if err := ns.Do(func() error { return gen.SendFlows(ns.PeerIdx, mix) }); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // let the receiving NAPI finish
		if _, err := io.WriteString(stdin, "\n"); err != nil {
			return fmt.Errorf("trigger a gather: %w", err)
		}
		fmt.Printf("# gather %d (counters are cumulative since attach)\n", g)
		if err := printGather(ctx, lines); err != nil {
			return err
		}
	}
	return nil
}

// transportText says how the frames leave the peer.
func transportText(t txgen.Transport) string {
	if t == txgen.Packet {
		return "an AF_PACKET socket"
	}
	return "live-frames XDP_TX"
}

// printGather prints the points of one gather, which ends with the
// xdp_drop_link point of the (single) interface.
func printGather(ctx context.Context, lines <-chan string) error {
	timeout := time.After(5 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return fmt.Errorf("the plugin closed its output")
			}
			fmt.Println(line)
			if strings.HasPrefix(line, "xdp_drop_link,") {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("no gather output within 5s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func waitAttached(ctx context.Context, ns *testns.NS) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if id, err := ns.XDPProgramID(testns.Dev); err != nil {
			return err
		} else if id != 0 {
			status("attached: %s runs XDP program id %d", testns.Dev, id)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s has no XDP program after 10s", testns.Dev)
}

func noXDP(ns *testns.NS) bool {
	id, err := ns.XDPProgramID(testns.Dev)
	return err == nil && id == 0
}

func flowNames(flows []traffic.Flow) string {
	var parts []string
	for _, f := range flows {
		parts = append(parts, fmt.Sprintf("%d %s", f.Count, f.Name))
	}
	return strings.Join(parts, ", ")
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

func status(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// prefixWriter marks the plugin's own log lines in the demo's output.
type prefixWriter struct{ w io.Writer }

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprint(p.w, "plugin: "+line)
		}
	}
	return len(b), nil
}

// demoPrefix names the demo's namespaces when XDP_DROP_TEST_NETNS_PREFIX
// does not.
const demoPrefix = "xdpdrop-demo-"

// createNamespace makes the demo's namespace, named with the tests' prefix
// when XDP_DROP_TEST_NETNS_PREFIX sets one: a run that checks for leftover
// namespaces of its prefix then sees the demo's too.
func createNamespace() (*testns.NS, error) {
	prefix := os.Getenv(testns.PrefixEnv)
	if prefix == "" {
		prefix = demoPrefix
	}
	return testns.Create(prefix)
}
