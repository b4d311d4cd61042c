//go:build linux

// Package testns gives each privileged test a network namespace of its own
// with a veth pair inside, removed when the test ends, and refuses to let a
// test attach anywhere else: the initial namespace carries the machine's own
// network.
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// RequireEnv turns skipped privileged tests into failures when set to 1 (CI sets it).
const RequireEnv = "XDP_DROP_REQUIRE_PRIVILEGED"

// PrefixEnv sets the name prefix of the namespaces tests create (default
// "xdpdrop-test-"). CI sets one of its own, so that it can tell the
// namespaces its run left behind from those of other runs on the machine.
const PrefixEnv = "XDP_DROP_TEST_NETNS_PREFIX"

// Prefix is the name prefix for test namespaces.
func Prefix() string {
	if p := os.Getenv(PrefixEnv); p != "" {
		return p
	}
	return "xdpdrop-test-"
}

// Hang is how long a test waits for an outcome (a detach, an exit, frames
// counted) before it calls the code under test hung. It is far beyond any
// latency, so a loaded machine never reaches it: tests assert outcomes, and
// make bench measures latencies.
const Hang = time.Minute

// Veth names inside every test namespace: traffic is sent from Peer and
// received (and filtered) on Dev.
const (
	Dev  = "xdpt0"
	Peer = "xdpt1"
)

// RequirePrivileged skips the test unless it runs as root, or fails it when
// XDP_DROP_REQUIRE_PRIVILEGED=1 says privileged tests must run.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("privileged test needs root, and %s=1 forbids skipping it", RequireEnv)
	}
	t.Skip("needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN) to create namespaces and attach XDP")
}

// NS is a network namespace made for one test, holding the veth pair Dev/Peer.
type NS struct {
	Name    string
	Path    string
	handle  netns.NsHandle
	nl      *netlink.Handle
	DevIdx  int
	PeerIdx int
	veths   map[string]bool // devices this helper created
	dir     int             // runDir as it was when the namespace was mounted in it
}

// New creates a named network namespace ("ip netns exec NAME" works in it)
// with a veth pair, both ends up, IPv6 off so the kernel sends nothing of its
// own. It is deleted when the test ends.
func New(t testing.TB) *NS {
	t.Helper()
	RequirePrivileged(t)
	n, err := Create(Prefix())
	if err != nil {
		t.Fatalf("create test namespace: %v", err)
	}
	// A namespace another process keeps busy is not this test's failure;
	// CI fails the run for any namespace of its prefix left behind.
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Logf("test namespace left behind: %v", err)
		}
	})
	return n
}

// Create makes a namespace named prefix plus a random suffix, set up as New
// does, for programs that are not tests (the demo, benchmarks). The caller
// must Delete it.
func Create(prefix string) (*NS, error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	n := &NS{Name: prefix + hex.EncodeToString(suffix[:])}
	n.Path = "/var/run/netns/" + n.Name
	var err error
	if n.dir, err = openRunDir(); err != nil {
		return nil, err
	}

	// netns.NewNamed moves the calling thread: the thread is put back.
	err = nsthread.Do(func() error {
		h, err := netns.NewNamed(n.Name)
		n.handle = h
		return err
	}, func() error { return nil })
	if err != nil {
		unix.Close(n.dir)
		return nil, fmt.Errorf("new namespace: %w", err)
	}
	if err := n.setup(); err != nil {
		n.Delete()
		return nil, err
	}
	return n, nil
}

func (n *NS) setup() error {
	var err error
	n.nl, err = netlink.NewHandleAt(n.handle)
	if err != nil {
		return fmt.Errorf("netlink in namespace: %w", err)
	}
	if err := n.Do(func() error {
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("disable IPv6: %w", err)
	}
	var err2 error
	n.DevIdx, n.PeerIdx, err2 = n.AddVeth(Dev, Peer)
	return err2
}

// AddVeth creates another veth pair in the namespace, both ends up, and
// returns their indexes. Its ends become attachable.
func (n *NS) AddVeth(name, peer string) (int, int, error) {
	return n.AddVethQueues(name, peer, 1)
}

// AddVethQueues is AddVeth with queues RX and TX queues on each end. A
// frame sent with XDP_TX from CPU c arrives on RX queue c % queues.
func (n *NS) AddVethQueues(name, peer string, queues int) (int, int, error) {
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: name, NumRxQueues: queues, NumTxQueues: queues},
		PeerName:  peer, PeerNumRxQueues: uint32(queues), PeerNumTxQueues: uint32(queues),
	}
	if err := n.nl.LinkAdd(veth); err != nil {
		return 0, 0, fmt.Errorf("add veth %s/%s: %w", name, peer, err)
	}
	if n.veths == nil {
		n.veths = make(map[string]bool)
	}
	var idx [2]int
	for i, ifname := range []string{name, peer} {
		n.veths[ifname] = true
		l, err := n.nl.LinkByName(ifname)
		if err != nil {
			return 0, 0, err
		}
		if err := n.nl.LinkSetUp(l); err != nil {
			return 0, 0, fmt.Errorf("set %s up: %w", ifname, err)
		}
		idx[i] = l.Attrs().Index
	}
	return idx[0], idx[1], nil
}

// AddBridge creates a bridge in the namespace, which has no native XDP: a
// device for tests of the generic fallback. It becomes attachable.
func (n *NS) AddBridge(name string) error {
	if err := n.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return fmt.Errorf("add bridge %s: %w", name, err)
	}
	l, err := n.nl.LinkByName(name)
	if err != nil {
		return err
	}
	if n.veths == nil {
		n.veths = make(map[string]bool)
	}
	n.veths[name] = true
	return n.nl.LinkSetUp(l)
}

// DelLink deletes an interface of the namespace (a veth takes its peer along).
func (n *NS) DelLink(name string) error {
	l, err := n.nl.LinkByName(name)
	if err != nil {
		return err
	}
	return n.nl.LinkDel(l)
}

// Delete removes the namespace and everything in it, even while other
// processes on the host enter and leave namespaces; an error names the
// mounts that still keep it.
func (n *NS) Delete() error {
	if n.nl != nil {
		n.nl.Close()
	}
	if n.handle.IsOpen() {
		n.handle.Close()
	}
	dir := n.dir
	n.dir = -1
	defer unix.Close(dir)
	if err := removeNamed(dir, n.Name); err != nil {
		return fmt.Errorf("delete namespace %s: %w", n.Name, err)
	}
	return nil
}

// Do runs f on an OS thread that is inside the namespace, so that every
// syscall f makes from the calling goroutine (netlink, bpf link_create,
// BPF_PROG_TEST_RUN with an ingress ifindex) acts on the namespace.
func (n *NS) Do(f func() error) error {
	return nsthread.Do(func() error {
		if err := netns.Set(n.handle); err != nil {
			return fmt.Errorf("enter namespace %s: %w", n.Name, err)
		}
		return nil
	}, f)
}

// Netlink returns a netlink handle that acts inside the namespace.
func (n *NS) Netlink() *netlink.Handle { return n.nl }

// CheckAttachable returns an error unless the calling thread is inside this
// test namespace and ifname is one of its veth ends. Every test attach goes
// through it, so a test cannot drop traffic on the machine's own interfaces.
func (n *NS) CheckAttachable(ifname string) error {
	if err := CheckNotInitial(); err != nil {
		return err
	}
	cur, err := netns.Get()
	if err != nil {
		return err
	}
	defer cur.Close()
	if !cur.Equal(n.handle) {
		return fmt.Errorf("refusing to attach to %q: the calling thread is not in test namespace %s", ifname, n.Name)
	}
	if !n.veths[ifname] {
		return fmt.Errorf("refusing to attach to %q: only devices this test created may be used", ifname)
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("refusing to attach to %q: %w", ifname, err)
	}
	if l.Type() != "veth" && l.Type() != "bridge" {
		return fmt.Errorf("refusing to attach to %q: it is a %s, not a test veth or bridge", ifname, l.Type())
	}
	return nil
}

// Attach runs attach on a thread inside this namespace once
// CheckAttachable has allowed ifname: the one way tests attach.
func (n *NS) Attach(ifname string, attach func() error) error {
	return n.Do(func() error {
		if err := n.CheckAttachable(ifname); err != nil {
			return err
		}
		return attach()
	})
}

// hostNS identifies the network namespace this process started in, read
// before any thread moved: the machine's own, or one the tests were put in.
var hostNS, hostNSErr = nsOf("/proc/self/ns/net")

func nsOf(path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	return st, err
}

// CheckNotInitial returns an error when the calling thread is in the network
// namespace the process started in (or in PID 1's, where that is readable).
func CheckNotInitial() error {
	if hostNSErr != nil {
		return fmt.Errorf("identify the starting network namespace: %w", hostNSErr)
	}
	cur, err := nsOf(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return fmt.Errorf("identify the current network namespace: %w", err)
	}
	same := func(a unix.Stat_t) bool { return a.Ino == cur.Ino && a.Dev == cur.Dev }
	if same(hostNS) {
		return errors.New("refusing to attach in the network namespace the tests started in: it may carry this machine's own network")
	}
	if pid1, err := nsOf("/proc/1/ns/net"); err == nil && same(pid1) {
		return errors.New("refusing to attach in the initial network namespace: it carries this machine's own network")
	}
	return nil
}

// Exec runs a command inside the namespace (ip netns exec) and returns it
// unstarted, tied to the test process (ip netns exec execs it, keeping the
// tie).
func (n *NS) Exec(name string, args ...string) *exec.Cmd {
	return testproc.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// XDPProgramID returns the id of the XDP program on ifname in the namespace, 0 if none.
func (n *NS) XDPProgramID(ifname string) (uint32, error) {
	l, err := n.nl.LinkByName(ifname)
	if err != nil {
		return 0, err
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId, nil
	}
	return 0, nil
}

// WaitNoXDP polls until ifname has no XDP program, for at most d; it returns
// how long that took, or an error naming the program still attached.
func (n *NS) WaitNoXDP(ifname string, d time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		id, err := n.XDPProgramID(ifname)
		if err != nil {
			return 0, err
		}
		if id == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > d {
			return 0, fmt.Errorf("%s still has XDP program %d after %v", ifname, id, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stats returns the interface counters of ifname in the namespace, as ip -s
// link shows them.
func (n *NS) Stats(ifname string) (*netlink.LinkStatistics, error) {
	l, err := n.nl.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	if s := l.Attrs().Statistics; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("no statistics for %s", ifname)
}

// RxPackets returns the rx_packets counter of ifname in the namespace.
func (n *NS) RxPackets(ifname string) (uint64, error) {
	l, err := n.nl.LinkByName(ifname)
	if err != nil {
		return 0, err
	}
	if s := l.Attrs().Statistics; s != nil {
		return s.RxPackets, nil
	}
	return 0, errors.New("no statistics")
}

// Cmdline describes a command for error messages.
func Cmdline(c *exec.Cmd) string { return strings.Join(c.Args, " ") }
