//go:build linux

// Command sendlimit sends the frames of the end-to-end run's limit rule,
// SCTP to port 9 (no frame of the mix is SCTP), out of one end of a veth
// pair, in sends of -batch frames every -every until -count frames or
// -duration, and prints, as JSON, how many it sent and how long it took.
// Like sendmix it must run inside the run's own network namespace
// (ip netns exec NS sendlimit -netns NS -iface PEER -count 200); it refuses
// any other.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
	"github.com/xdp-drop/xdp_drop/test/e2e/internal/e2ens"
)

// Report is what sendlimit prints.
type Report struct {
	Frames  uint64  `json:"frames"`
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sendlimit:", err)
		os.Exit(1)
	}
}

func run() error {
	netns := flag.String("netns", "", "name of the network namespace this runs in (required, as ip netns names it)")
	iface := flag.String("iface", "", "veth end to send from (required); its peer receives")
	count := flag.Int("count", 0, "frames to send (0: until -duration or a signal)")
	duration := flag.Duration("duration", 0, "keep sending until this much time has passed")
	batch := flag.Int("batch", 0, "frames per send (0: all of -count in one)")
	every := flag.Duration("every", 0, "start a send at most this often")
	flag.Parse()
	if *netns == "" || *iface == "" || *count == 0 && *duration == 0 {
		flag.Usage()
		return errors.New("-netns, -iface and -count or -duration are required")
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
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	frame := Frame()
	per := *batch
	if per == 0 {
		per = *count
	}
	start := time.Now()
	var sent int
	for *count == 0 || sent < *count {
		if *duration > 0 && time.Since(start) >= *duration {
			break
		}
		n := per
		if *count > 0 {
			n = min(n, *count-sent)
		}
		next := time.After(*every)
		if err := gen.Send(ifindex, frame, n); err != nil {
			return err
		}
		sent += n
		select {
		case <-stop:
			*count, *duration = sent, 0
		case <-next:
		}
	}
	return json.NewEncoder(os.Stdout).Encode(Report{Frames: uint64(sent), Bytes: uint64(sent * len(frame)), Seconds: time.Since(start).Seconds()})
}

// Frame is the limit rule's frame: IPv4 SCTP from 198.51.100.7 to port 9.
func Frame() []byte {
	l4 := frames.Ports(frames.UDP(18), 40000, 9) // SCTP begins with the two ports too
	return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoSCTP, 0, l4),
		netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.1")))
}
