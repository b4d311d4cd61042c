//go:build linux

// Command sendmix sends the project's traffic mix (internal/traffic.Mix) out
// of one end of a veth pair and prints, as JSON, what the xdp_drop plugin on
// the other end must count: packets and bytes per family, protocol and action
// tag. The end-to-end run (test/e2e/run.sh) compares that with what reaches
// InfluxDB. It must run inside the run's own network namespace
// (ip netns exec NS sendmix -netns NS -iface PEER -drop udp,gre); it refuses
// any other.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/traffic"
)

// protocolTags are the plugin's protocol tag values (IANA keywords) for the
// IP protocols the mix carries. The plugin exports no lookup, so the few the
// mix needs are written out here; a mix protocol missing from this table is
// an error, never a silent number.
var protocolTags = map[uint8]string{1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 58: "ipv6-icmp"}

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
	ifindex, err := checkSafe(*netns, *iface)
	if err != nil {
		return err
	}
	gen, err := traffic.NewGenerator()
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

	report, err := expected(mix, n, policy)
	if err != nil {
		return err
	}
	report.Seconds = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(report)
}

// send sends whole rounds of the mix: rounds of them, or as many as fit in
// duration when it is set, until stop fires. It returns how many it sent.
func send(gen *traffic.Generator, ifindex int, mix []traffic.Flow, rounds int, duration, every time.Duration, stop <-chan os.Signal) (int, error) {
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
// with the classifier's own family and protocol and the policy's verdict.
func expected(mix []traffic.Flow, rounds int, policy bpf.Policy) (Report, error) {
	r := Report{Rounds: rounds}
	for i, c := range traffic.Expected(mix) {
		if c.Packets == 0 {
			continue
		}
		class := bpf.Class(i)
		protocol := class.Name()
		if proto, ok := class.Protocol(); ok {
			if protocol, ok = protocolTags[proto]; !ok {
				return r, fmt.Errorf("the mix carries IP protocol %d, which has no tag in sendmix's table", proto)
			}
		}
		action := "pass"
		if policy.Drops(class) {
			action = "drop"
		}
		s := Series{
			Family:   class.Family().String(),
			Protocol: protocol,
			Action:   action,
			Packets:  c.Packets * uint64(rounds),
			Bytes:    c.Bytes * uint64(rounds),
		}
		r.Frames += s.Packets
		r.Series = append(r.Series, s)
	}
	sort.Slice(r.Series, func(i, j int) bool {
		a, b := r.Series[i], r.Series[j]
		return a.Family+"/"+a.Protocol+"/"+a.Action < b.Family+"/"+b.Protocol+"/"+b.Action
	})
	return r, nil
}

// parsePolicy reads a drop list the way the plugin's drop option reads it,
// limited to the protocols in protocolTags and numbers.
func parsePolicy(list string) (bpf.Policy, error) {
	if strings.EqualFold(list, "all") {
		return bpf.Policy{DropAll: true}, nil
	}
	var p bpf.Policy
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if n, err := strconv.ParseUint(item, 10, 8); err == nil {
			p.Protocols = append(p.Protocols, uint8(n))
			continue
		}
		found := false
		for n, tag := range protocolTags {
			if strings.EqualFold(item, tag) {
				p.Protocols, found = append(p.Protocols, n), true
			}
		}
		if !found {
			return p, fmt.Errorf("-drop: %q is not one of the mix's protocols (%v) nor a number", item, protocolTags)
		}
	}
	return p, nil
}

// checkSafe refuses to send unless this process is in the named network
// namespace (never the initial one, which carries the machine's own network)
// and the interface is a veth.
func checkSafe(netns, name string) (int, error) {
	self, err := nsID("/proc/self/ns/net")
	if err != nil {
		return 0, err
	}
	named, err := nsID("/run/netns/" + netns)
	if err != nil {
		return 0, fmt.Errorf("network namespace %q: %w", netns, err)
	}
	if self != named {
		return 0, fmt.Errorf("refusing to send: this process is not in network namespace %q; run under ip netns exec %s", netns, netns)
	}
	// PID 1's namespace is the initial one; some containers hide it.
	if initial, err := nsID("/proc/1/ns/net"); err == nil && initial == self {
		return 0, errors.New("refusing to send from the initial network namespace")
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("interface %q: %w", name, err)
	}
	if l.Type() != "veth" {
		return 0, fmt.Errorf("refusing to send from %q: it is a %s, not a veth", name, l.Type())
	}
	return l.Attrs().Index, nil
}

// nsID identifies a namespace file by device and inode.
func nsID(path string) ([2]uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return [2]uint64{}, err
	}
	return [2]uint64{st.Dev, st.Ino}, nil
}
