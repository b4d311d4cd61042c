package bpf_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
)

// TestBanBucketRewrittenWhileRead: a range ban in force drops every frame
// of its sources while a longer prefix of the same bucket is banned and
// lifted over and over, each time rewriting the bucket the program reads.
func TestBanBucketRewrittenWhileRead(t *testing.T) {
	for _, c := range []struct{ name, ban, toggle, src string }{
		{"IPv4", "10.1.2.0/24", "10.1.9.9/32", "10.1.2.3"},
		{"IPv6", "2001:db8:1:200::/56", "2001:db8:1:9::9/128", "2001:db8:1:203::3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := loadBans(t, bpf.Policy{})
			r.ban(c.ban, time.Hour, 0)
			frame := from(c.src).build()
			toggle := netip.MustParsePrefix(c.toggle)
			var stop atomic.Bool
			done := make(chan error, 1)
			var toggles int
			go func() {
				for !stop.Load() {
					if _, err := r.table.Ban(toggle, time.Now().Add(time.Hour), 0); err != nil {
						done <- err
						return
					}
					if _, err := r.table.Lift(toggle, 0); err != nil {
						done <- err
						return
					}
					toggles++
				}
				done <- nil
			}()
			const repeat = 100000
			var sent uint64
			for end := time.Now().Add(6 * time.Second); time.Now().Before(end); sent += repeat {
				_, err := r.p.XDP().Run(&ebpf.RunOptions{Data: frame, Repeat: repeat})
				require.NoError(t, err)
			}
			stop.Store(true)
			require.NoError(t, <-done)
			require.NotZero(t, toggles, "the bucket was never rewritten")
			// Passed frames are read from the program's own counters, not
			// as sent less dropped: a test run interrupted by a signal is
			// run again (EINTR), so the program runs more frames than sent.
			var b bpf.Block
			require.NoError(t, r.p.ReadBlock(&b))
			class := bpf.IPv4Class(frames.ProtoUDP)
			if netip.MustParseAddr(c.src).Is6() {
				class = bpf.IPv6Class(frames.ProtoUDP)
			}
			passed, dropped := b.Class[class][bpf.ActionPass].Packets, r.counts()[0][0].Packets
			t.Logf("%d frames from %s banned by %s, %s banned and lifted %d times: %d dropped by the ban, %d passed", sent, c.src, c.ban, c.toggle, toggles, dropped, passed)
			require.Zero(t, passed, "frames of a banned source passed while its bucket was rewritten")
			require.GreaterOrEqual(t, dropped, sent, "every frame sent ran")
		})
	}
}
