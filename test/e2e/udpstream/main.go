//go:build linux

// Command udpstream sends IPv4/UDP without pause out of one end of a veth
// pair and counts what the other end lets through to its network stack,
// while polling whether that end has an XDP program. The end-to-end run
// (test/e2e/run.sh) runs it across Telegraf reloads: with the plugin
// dropping UDP, no frame may get through. It turns GRO on for the receiving
// end, so that the veth takes frames in even while it has no XDP program:
// an unfiltered moment shows. On SIGTERM it prints a JSON report. It must
// run inside the run's own network namespace; it refuses any other.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
	"github.com/xdp-drop/xdp_drop/test/e2e/internal/e2ens"
)

// Report is what udpstream prints.
type Report struct {
	Sent      int64   `json:"sent"`      // frames handed to the veth
	Delivered int64   `json:"delivered"` // of those, the frames the receiving end took in
	Seconds   float64 `json:"seconds"`
	Rate      int64   `json:"frames_per_second"` // delivered
	Leaked    int64   `json:"leaked"`            // UDP frames that reached the receiving stack
	Polls     int64   `json:"polls"`
	NoXDP     int64   `json:"polls_without_xdp"`
	LongestMS float64 `json:"longest_without_xdp_ms"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "udpstream:", err)
		os.Exit(1)
	}
}

func run() error {
	netns := flag.String("netns", "", "name of the network namespace this runs in (required)")
	from := flag.String("iface", "", "veth end to send from (required)")
	to := flag.String("sink", "", "veth end that receives, where the plugin attaches (required)")
	senders := flag.Int("senders", 2, "parallel senders (each send waits for an RCU grace period)")
	batch := flag.Int("batch", 64, "frames per send")
	flag.Parse()
	if *netns == "" || *from == "" || *to == "" {
		flag.Usage()
		return errors.New("-netns, -iface and -sink are required")
	}
	fromIdx, err := e2ens.CheckVeth(*netns, *from)
	if err != nil {
		return err
	}
	toIdx, err := e2ens.CheckVeth(*netns, *to)
	if err != nil {
		return err
	}
	if err := testns.EnableGROHere(*to); err != nil {
		return err
	}
	sink, err := openSink(toIdx)
	if err != nil {
		return err
	}
	gen, err := txgen.New()
	if err != nil {
		return err
	}
	defer gen.Close()
	dropped0, err := txDropped(*from)
	if err != nil {
		return err
	}

	stop := make(chan struct{})
	var r Report
	var wg sync.WaitGroup
	var sent atomic.Int64
	var sendErr atomic.Value
	frame := frames.Ether(frames.EtherIPv4, frames.IPv4(frames.ProtoUDP, 0, frames.UDP(18)))
	start := time.Now()
	for range *senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := gen.Send(fromIdx, frame, *batch); err != nil {
					sendErr.Store(err)
					return
				}
				sent.Add(int64(*batch))
			}
		}()
	}
	var leaked atomic.Int64
	go countLeaks(sink, &leaked)
	pollDone := make(chan struct{})
	go func() { poll(*to, stop, &r); close(pollDone) }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	close(stop)
	wg.Wait()
	<-pollDone
	r.Seconds = time.Since(start).Seconds()
	if err, ok := sendErr.Load().(error); ok {
		return err
	}
	time.Sleep(300 * time.Millisecond) // frames still in the veth's ring
	dropped, err := txDropped(*from)
	if err != nil {
		return err
	}
	r.Sent = sent.Load()
	r.Delivered = r.Sent
	if gen.Transport() == txgen.Live {
		// Live frames the peer's ring had no room for are lost, counted as
		// dropped on the sending end; AF_PACKET writes those again.
		r.Delivered -= int64(dropped - dropped0)
	}
	r.Rate = int64(float64(r.Delivered) / r.Seconds)
	r.Leaked = leaked.Load()
	return json.NewEncoder(os.Stdout).Encode(r)
}

// poll checks every millisecond whether ifname has an XDP program.
func poll(ifname string, stop <-chan struct{}, r *Report) {
	var emptySince time.Time
	for {
		select {
		case <-stop:
			return
		default:
		}
		l, err := netlink.LinkByName(ifname)
		if err == nil {
			r.Polls++
			now := time.Now()
			if x := l.Attrs().Xdp; x == nil || !x.Attached {
				r.NoXDP++
				if emptySince.IsZero() {
					emptySince = now
				}
			} else if !emptySince.IsZero() {
				r.LongestMS = max(r.LongestMS, float64(now.Sub(emptySince).Microseconds())/1000)
				emptySince = time.Time{}
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func openSink(ifindex int) (int, error) {
	proto := uint16(unix.ETH_P_ALL<<8&0xff00 | unix.ETH_P_ALL>>8)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return 0, fmt.Errorf("packet socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("bind packet socket: %w", err)
	}
	return fd, nil
}

// countLeaks counts the incoming IPv4/UDP frames the sink sees.
func countLeaks(fd int, n *atomic.Int64) {
	buf := make([]byte, 2048)
	for {
		m, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if m > 23 && buf[12] == 0x08 && buf[13] == 0x00 && buf[23] == frames.ProtoUDP {
			n.Add(1)
		}
	}
}

func txDropped(ifname string) (uint64, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0, err
	}
	if s := l.Attrs().Statistics; s != nil {
		return s.TxDropped, nil
	}
	return 0, errors.New("no link statistics")
}
