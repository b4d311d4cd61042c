//go:build linux

// Command sendban sends the frames of the end-to-end run's ban: -count IPv4
// GRE frames from 203.0.113.7 (the address the run's LAPI bans) out of one
// end of a veth pair, and prints, as JSON, what the plugin must count, in
// sendmix's report format: one series, ipv4/gre dropped (a frame a ban drops
// is counted in its class as a drop). Like sendmix it must run inside the
// run's own network namespace (ip netns exec NS sendban -netns NS -iface
// PEER -count 500); it refuses any other.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
	"github.com/xdp-drop/xdp_drop/test/e2e/internal/e2ens"
)

// Source is the banned address the frames come from.
const Source = "203.0.113.7"

// Series and Report are sendmix's.
type Series struct {
	Family   string `json:"family"`
	Protocol string `json:"protocol"`
	Action   string `json:"action"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
}

// Report is what sendban prints.
type Report struct {
	Rounds  int      `json:"rounds"`
	Frames  uint64   `json:"frames"`
	Seconds float64  `json:"seconds"`
	Series  []Series `json:"series"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sendban:", err)
		os.Exit(1)
	}
}

func run() error {
	netns := flag.String("netns", "", "name of the network namespace this runs in (required, as ip netns names it)")
	iface := flag.String("iface", "", "veth end to send from (required); its peer receives")
	count := flag.Int("count", 0, "frames to send (required)")
	flag.Parse()
	if *netns == "" || *iface == "" || *count <= 0 {
		flag.Usage()
		return errors.New("-netns, -iface and -count are required")
	}
	ifindex, err := e2ens.CheckVeth(*netns, *iface)
	if err != nil {
		return err
	}
	gen, err := txgen.New()
	if err != nil {
		return err
	}
	defer gen.Close()
	frame := Frame()
	start := time.Now()
	if err := gen.Send(ifindex, frame, *count); err != nil {
		return err
	}
	n := uint64(*count)
	return json.NewEncoder(os.Stdout).Encode(Report{
		Rounds: 1, Frames: n, Seconds: time.Since(start).Seconds(),
		Series: []Series{{Family: "ipv4", Protocol: "gre", Action: "drop", Packets: n, Bytes: n * uint64(len(frame))}},
	})
}

// Frame is the banned source's frame: IPv4 GRE from Source to 198.51.100.1.
func Frame() []byte {
	return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoGRE, 0, frames.Pad(24)),
		netip.MustParseAddr(Source), netip.MustParseAddr("198.51.100.1")))
}
