//go:build linux

// Command sendmix sends the project's traffic mix (internal/testing/traffic.Mix) out
// of one end of a veth pair and prints, as JSON, what the xdp_drop plugin on
// the other end must count: packets and bytes per family, protocol and action
// tag. The end-to-end run (test/e2e/run.sh) compares that with what reaches
// InfluxDB. It must run inside the run's own network namespace
// (ip netns exec NS sendmix -netns NS -iface PEER -drop udp,gre); it refuses
// any other. The drop list, protocol tags and actions are the plugin's own
// (its exported ParseDrop, ClassProtocol and Action).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/traffic"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
	"github.com/xdp-drop/xdp_drop/test/e2e/internal/e2ens"
)

// Series is one xdp_drop series the plugin must report, with its counters.
type Series struct {
	Family   string `json:"family"`
	Protocol string `json:"protocol"`
	Action   string `json:"action"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
}

// Report is what sendmix prints: what it sent, summed per series.
type Report struct {
	Rounds  int      `json:"rounds"`
	Frames  uint64   `json:"frames"`
	Seconds float64  `json:"seconds"`
	Series  []Series `json:"series"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sendmix:", err)
		os.Exit(1)
	}
}

func run() error {
	netns := flag.String("netns", "", "name of the network namespace this runs in (required, as ip netns names it)")
	iface := flag.String("iface", "", "veth end to send from (required); its peer receives")
	drop := flag.String("drop", "", `the plugin's drop list, comma separated: "all", or protocol names or numbers (udp,ipv6-icmp,47)`)
	dryRun := flag.Bool("dry_run", false, "the plugin runs with dry_run = true: what the list selects is counted as would_drop")
	rounds := flag.Int("rounds", 1, "how many times to send the whole mix")
	duration := flag.Duration("duration", 0, "keep sending rounds until this much time has passed (overrides -rounds)")
	every := flag.Duration("every", 0, "start a round at most this often (0: back to back)")
	flag.Parse()
	if *netns == "" || *iface == "" || *drop == "" {
		flag.Usage()
		return errors.New("-netns, -iface and -drop are required")
	}
	policy, err := parsePolicy(*drop)
	if err != nil {
		return err
	}
	policy.DryRun = *dryRun
	ifindex, err := e2ens.CheckVeth(*netns, *iface)
	if err != nil {
		return err
	}
	gen, err := txgen.New()
	if err != nil {
		return err
	}
	defer gen.Close()

	// SIGTERM or SIGINT ends a steady run after the current round, and the
	// report still counts every round sent.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	mix := traffic.Mix()
	start := time.Now()
	n, err := send(gen, ifindex, mix, *rounds, *duration, *every, stop)
	if err != nil {
		return err
	}

	report := expected(mix, n, policy)
	report.Seconds = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(report)
}

// send sends whole rounds of the mix: rounds of them, or as many as fit in
// duration when it is set, until stop fires. It returns how many it sent.
func send(gen *txgen.Generator, ifindex int, mix []traffic.Flow, rounds int, duration, every time.Duration, stop <-chan os.Signal) (int, error) {
	start := time.Now()
	for n := 0; ; n++ {
		if duration > 0 && time.Since(start) >= duration || duration == 0 && n >= rounds {
			return n, nil
		}
		next := time.After(every)
		if err := gen.SendFlows(ifindex, mix); err != nil {
			return n, err
		}
		select {
		case <-stop:
			return n + 1, nil
		case <-next:
		}
	}
}

// expected sums what was sent into the series the plugin reports, tagged
// as the plugin tags them: the classifier's family, the plugin's protocol
// tag and the policy's action.
func expected(mix []traffic.Flow, rounds int, policy bpf.Policy) Report {
	r := Report{Rounds: rounds}
	for i, c := range traffic.Expected(mix) {
		if c.Packets == 0 {
			continue
		}
		class := bpf.Class(i)
		s := Series{
			Family:   class.Family().String(),
			Protocol: xdp_drop.ClassProtocol(class),
			Action:   xdp_drop.Action(policy, class),
			Packets:  c.Packets * uint64(rounds),
			Bytes:    c.Bytes * uint64(rounds),
		}
		r.Frames += s.Packets
		r.Series = append(r.Series, s)
	}
	slices.SortFunc(r.Series, func(a, b Series) int {
		return strings.Compare(a.Family+"/"+a.Protocol+"/"+a.Action, b.Family+"/"+b.Protocol+"/"+b.Action)
	})
	return r
}

// parsePolicy reads a comma-separated drop list with the plugin's own
// parser, items as TOML would give them: numbers as integers.
func parsePolicy(list string) (bpf.Policy, error) {
	var items []any
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if n, err := strconv.ParseInt(item, 10, 64); err == nil {
			items = append(items, n)
			continue
		}
		items = append(items, item)
	}
	return xdp_drop.ParseDrop(items)
}
