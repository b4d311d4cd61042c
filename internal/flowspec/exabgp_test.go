//go:build linux

package flowspec

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// TestExaBGPInterop: the NTP rule announced by ExaBGP arrives identical to
// gobgpd's (components, action, text, ID), and IPv6 rules with it: one
// with a prefix offset refused, the ones around it exact.
func TestExaBGPInterop(t *testing.T) {
	needBinary(t, "exabgp")
	const addr = "127.0.0.4"
	port := freePort(t, addr)
	conf := filepath.Join(t.TempDir(), "exabgp.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`neighbor 127.0.0.1 {
  router-id %[1]s;
  local-address %[1]s;
  local-as 65000;
  peer-as 65001;
  passive true;
  listen %[2]d;
  family { ipv4 flow; ipv6 flow; }
  flow {
    route ntp {
      match {
        destination 192.0.2.10/32;
        protocol udp;
        source-port =123;
        packet-length >=400;
      }
      then { discard; }
    }
    route web6 {
      match {
        destination 2001:db8::10/128;
        next-header tcp;
        destination-port =80;
      }
      then { rate-limit 5000; }
    }
    route offset6 {
      match {
        destination-ipv6 2001:db8:0:1::/64/32;
        next-header udp;
      }
      then { discard; }
    }
    route zero6 {
      match {
        source-ipv6 2001:db8:5::/48/0;
      }
      then { discard; }
    }
  }
}
`, addr, port)), 0o600))
	out := &syncBuffer{}
	cmd := testproc.Command("env", "exabgp.tcp.bind="+addr, fmt.Sprintf("exabgp.tcp.port=%d", port),
		"exabgp.daemon.user=root", "exabgp.daemon.drop=false", "exabgp.api.cli=false", "exabgp.log.destination=stdout",
		"exabgp", conf)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), "start exabgp")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	a := &applied{}
	r, err := Start(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr(addr), Port: port, PeerAS: 65000}},
		Log:   logTo(t),
	}, a.apply)
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	deadline := time.Now().Add(20 * time.Second)
	for !r.Peers()[0].Up {
		select {
		case <-exited:
			t.Fatalf("exabgp exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session with exabgp within 20 s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	set := a.waitRules(t, 2*time.Second, 3)
	const web6 = "ipv6 destination 2001:db8::10/128 protocol ==6 destination-port ==80 then rate-limit 5000 bytes"
	const zero6 = "ipv6 source 2001:db8:5::/48 then discard"
	// ExaBGP 4 encodes an offset as GoBGP reads it (the old draft): the
	// rule arrives as sent, and is refused (RFC 8956 peers encode it
	// otherwise); the offset-0 rule sent after it arrives exact.
	const offset6 = "ipv6 destination 0:0:0:1::/64 offset 32 protocol ==17 then discard"
	require.Equal(t, []bpf.FlowRule{ntpFlowRule(), withID(bpf.FlowRule{IPv6: true, Dst: pfx("2001:db8::10/128"),
		Proto: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 6}}, DstPort: bpf.FlowComponent{{Op: bpf.FlowEQ, Value: 80}},
		Action: bpf.FlowLimit, Rate: 5000, RateBytes: true}, web6),
		withID(bpf.FlowRule{IPv6: true, Src: pfx("2001:db8:5::/48"), Action: bpf.FlowDrop}, zero6)}, set)
	waitFor(t, time.Second, "the offset rule", func() bool { return len(r.Rules()) == 4 })
	st := r.Rules()
	require.Equal(t, []string{ntpText, web6, zero6, offset6}, []string{st[0].Text, st[1].Text, st[2].Text, st[3].Text})
	require.Equal(t, ReasonUnsupported, st[3].Refused)
	require.Equal(t, &bpf.FlowPrefix{Prefix: netip.MustParsePrefix("0:0:0:1::/64"), Offset: 32}, st[3].Rule.Dst)
	require.Equal(t, map[string]int{ReasonUnsupported: 1}, r.Peers()[0].Refused)
}
