//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/binarytest"
	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// countingProxy forwards to the LAPI at target and counts the requests.
func countingProxy(t *testing.T, target string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	var n atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// withoutEnv is the environment without the variable name.
func withoutEnv(name string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, name+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestViewsOfBans: beside an instance with [bans] (a real LAPI's ban in
// force, its key from the environment), -status and -watch with the
// identical config and no key in their environment read it: the bans in
// force from the kernel, the frames they dropped, and never ask the LAPI
// (its proxy counts the instance's one pull only).
func TestViewsOfBans(t *testing.T) {
	l := lapi.Start(t)
	proxy, requests := countingProxy(t, l.URL())
	t.Setenv("XDP_DROP_TEST_BOUNCER_KEY", l.AddBouncer("xdp-drop-views"))
	l.AddDecision("203.0.113.0/24", time.Hour)
	ns := testns.New(t)
	conf := writeConfig(t, fmt.Sprintf(`[[inputs.xdp_drop]]
  namespace = %q
  interfaces = [%q]
  drop = ["gre"]
  handover_timeout = "0s"
  [inputs.xdp_drop.bans]
    [inputs.xdp_drop.bans.crowdsec]
      url = %q
      api_key = "${XDP_DROP_TEST_BOUNCER_KEY}"
      interval = "1h"
`, ns.Name, testns.Dev, proxy.URL))
	instance := startHereAt(t, ns, conf, mustReadFile(t, conf))
	gatherUntil(t, instance, func(ms []telegraf.Metric) bool { return fieldOf(banPointOf(ms, testns.Dev), "active") == 1 })
	banned := frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, frames.Ports(frames.UDP(18), 1, 2)),
		netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("10.9.0.1")))
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, banned, 9) }))
	gatherUntil(t, instance, func(ms []telegraf.Metric) bool { return fieldOf(banPointOf(ms, testns.Dev), "packets") == 9 })
	pulls := requests.Load()
	require.Equal(t, int64(1), pulls, "the instance's first pull")

	env := withoutEnv("XDP_DROP_TEST_BOUNCER_KEY")
	status := exec.Command(binary, "-config", conf, "-status", "-json")
	status.Env = env
	stdout, stderr, code := runSplit(t, status)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &report), stdout)
	require.Equal(t, []banStatus{{Interface: testns.Dev, Origin: "crowdsec", Action: "drop", InForce: 1, Packets: 9, Bytes: uint64(9 * len(banned))}}, report.Bans)
	human := exec.Command(binary, "-config", conf, "-status")
	human.Env = env
	stdout, stderr, code = runSplit(t, human)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Regexp(t, `(?m)^crowdsec\s+xdpt0\s+drop\s+1\s+9\s+`, stdout)

	watch := exec.Command(binary, "-config", conf, "-watch")
	watch.Env = env
	var out, errOut binarytest.Buffer
	watch.Stdout, watch.Stderr = &out, &errOut
	require.NoError(t, testproc.Tie(watch).Start())
	done := make(chan error, 1)
	go func() { done <- watch.Wait() }()
	t.Cleanup(func() { watch.Process.Kill() })
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^xdpt0\s+crowdsec\s+drop\s+\S+\s+\S+\s+9$`),
		regexp.MustCompile(`(?m)^\s+bans in force \(read from the kernel\): crowdsec 1$`),
	}
	all := func(screen string) bool {
		for _, re := range want {
			if !re.MatchString(screen) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(testns.Hang); !all(lastScreen(out.String())) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	screen := lastScreen(out.String())
	for _, re := range want {
		require.Regexp(t, re, screen, "stderr: %s", errOut.String())
	}
	require.NotContains(t, screen, "not synced yet")
	require.NoError(t, watch.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done, "stderr: %s", errOut.String())

	require.Equal(t, pulls, requests.Load(), "no view asked the LAPI")
	require.NotContains(t, errOut.String()+stderr, "E! ")
	require.NoError(t, instance.stdin.Close())
	require.NoError(t, instance.wait(t))
}
