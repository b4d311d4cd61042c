//go:build linux

package xdp_drop

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestChurnLogsOncePerChange creates and deletes interfaces that a glob
// matches, and one named exactly, while another goroutine gathers without
// pause, so that interfaces also vanish between lookup and attach. Every
// interface gets at most one log or error line per change of its state:
// a matched one that goes is an I! line, never an error; the named one is
// an error once per disappearance. XDP_DROP_CHURN_OPS sets the number of
// creations and deletions (default 150: a few seconds; the property does not
// depend on the duration).
func TestChurnLogsOncePerChange(t *testing.T) {
	ops := 150
	if v, err := strconv.Atoi(os.Getenv("XDP_DROP_CHURN_OPS")); err == nil && v > 0 {
		ops = v
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	ns := testns.New(t)
	names := []string{"xdpc0", "xdpc1", "xdpc2", "xdpn0"}
	peers := map[string]string{"xdpc0": "xdpd0", "xdpc1": "xdpd1", "xdpc2": "xdpd2", "xdpn0": "xdpm0"}
	log := &recordLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpc*", "xdpn0"}, Drop: []any{"all"}, Log: log})
	require.NoError(t, p.Init())

	var mu sync.Mutex // guards errs
	var errs []string
	gather := func(start bool) {
		acc := &testutil.Accumulator{}
		require.NoError(t, ns.Do(func() error {
			// Only this test's veths (and lo, which patterns never match)
			// exist in the namespace: the plugin can attach nowhere else.
			if err := testns.CheckNotInitial(); err != nil {
				return err
			}
			if start {
				return p.Start(acc)
			}
			return p.Gather(acc)
		}))
		mu.Lock()
		defer mu.Unlock()
		for _, err := range acc.Errors {
			errs = append(errs, "E! "+err.Error())
		}
	}
	gather(true)
	t.Cleanup(func() { ns.Do(func() error { p.Stop(); return nil }) })

	stop := make(chan struct{})
	done := make(chan struct{})
	gathers := 0
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			gather(false)
			gathers++
			time.Sleep(time.Millisecond) // leave the shared CPUs some air
		}
	}()

	present := map[string]bool{}
	changes := map[string]int{}
	for i := 0; i < ops; i++ {
		name := names[rng.IntN(len(names))]
		if present[name] {
			require.NoError(t, ns.DelLink(name))
		} else {
			_, _, err := ns.AddVeth(name, peers[name])
			require.NoError(t, err)
		}
		present[name] = !present[name]
		changes[name]++
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	close(stop)
	<-done
	gather(false)
	gather(false)

	mu.Lock()
	lines := append(log.all(), errs...)
	mu.Unlock()
	for _, name := range names {
		var mine []string
		for _, l := range lines {
			if strings.Contains(l, `"`+name+`"`) {
				mine = append(mine, l)
			}
		}
		// The named interface is reported missing at the start: one more state.
		allowed := changes[name]
		if name == "xdpn0" {
			allowed++
		}
		require.LessOrEqual(t, len(mine), allowed, "%s: %d changes, lines:\n%s", name, changes[name], strings.Join(mine, "\n"))
		for _, l := range mine {
			if strings.HasPrefix(name, "xdpc") {
				require.True(t, strings.HasPrefix(l, "I! "), "a matched interface coming and going is no error: %s", l)
			} else if strings.HasPrefix(l, "E! ") {
				require.Contains(t, l, `interface "xdpn0" not found`, "only its absence is an error")
			}
		}
	}
	for _, name := range names {
		id, err := ns.XDPProgramID(name)
		if !present[name] {
			continue
		}
		require.NoError(t, err)
		require.NotZero(t, id, "%s is there at the end and attached", name)
	}
	t.Logf("%d creations and deletions, %d gathers meanwhile, %d log and error lines", ops, gathers, len(lines))
	for _, l := range lines {
		if strings.Contains(l, "while it was being attached") {
			t.Logf("a vanish mid-attach was seen: %s", l)
			break
		}
	}
}
