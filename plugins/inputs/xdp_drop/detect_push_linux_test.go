//go:build linux

package xdp_drop

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// TestDetectPushWhatCrowdSecShows: the binary's version reaches the LAPI
// as the bouncer's and the machine's, and a pushed ban's alert carries
// the scenario's version and, as its event's meta, the evidence: rates,
// protocol, interface, that the sources were not verified, the host.
func TestDetectPushWhatCrowdSecShows(t *testing.T) {
	l := lapi.Start(t)
	pwFile := filepath.Join(t.TempDir(), "machine.pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("edge-pass-word\n"), 0o600))
	l.Cscli("machines", "add", "xdp-drop-edge1", "--password", "edge-pass-word", "--force", "-f", filepath.Join(t.TempDir(), "creds.yaml"))
	key := l.AddBouncer("xdp-drop-edge1")
	ns := testns.New(t)
	p := detectPlugin(&DetectConfig{
		PPS: 1000, DryRun: enforce(), UnverifiedAction: "drop", PushUnverified: true,
		CrowdSecPush: true, CrowdSecLogin: "xdp-drop-edge1", CrowdSecPasswordFile: pwFile,
	}, &BansConfig{CrowdSec: &CrowdSecConfig{URL: l.URL(), APIKey: key, Interval: config.Duration(testBanInterval)}})
	p.Run.Version = "1.2.3~git20261206.abc1234"
	require.Empty(t, startPlugin(t, ns, p).Errors)
	flood(t, ns, []string{"198.51.100.7"}, 10_000, func() bool { return banCounter(t, p, bpf.BanDrop) > 0 })
	for deadline := time.Now().Add(testns.Hang); ; time.Sleep(50 * time.Millisecond) {
		ban, _ := gatherDetect(t, ns, p)
		if field(ban.Fields(), FieldPushed) == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the ban not pushed within %v: %v", testns.Hang, ban.Fields())
	}

	var bouncers []struct{ Name, Type, Version string }
	require.NoError(t, json.Unmarshal([]byte(l.Cscli("bouncers", "list", "-o", "json")), &bouncers))
	require.Len(t, bouncers, 1)
	require.Equal(t, "xdp-drop", bouncers[0].Type)
	require.Equal(t, "1.2.3~git20261206.abc1234", bouncers[0].Version)
	var machines []struct {
		MachineID string `json:"machineId"`
		Version   string `json:"version"`
	}
	require.NoError(t, json.Unmarshal([]byte(l.Cscli("machines", "list", "-o", "json")), &machines))
	versions := map[string]string{}
	for _, m := range machines {
		versions[m.MachineID] = m.Version
	}
	require.Equal(t, "1.2.3~git20261206.abc1234", versions["xdp-drop-edge1"])

	var alerts []struct {
		MachineID       string `json:"machine_id"`
		Scenario        string `json:"scenario"`
		ScenarioVersion string `json:"scenario_version"`
		EventsCount     int    `json:"events_count"`
		Source          struct{ Scope, Value string }
		Events          []struct{ Meta []struct{ Key, Value string } }
	}
	require.NoError(t, json.Unmarshal([]byte(l.Cscli("alerts", "list", "-o", "json")), &alerts))
	require.Len(t, alerts, 1)
	a := alerts[0]
	require.Equal(t, "xdp-drop-edge1", a.MachineID)
	require.Equal(t, "xdp-drop/detect", a.Scenario)
	require.Equal(t, "1.2.3~git20261206.abc1234", a.ScenarioVersion)
	require.Equal(t, "Ip", a.Source.Scope)
	require.Equal(t, "198.51.100.7", a.Source.Value)
	require.Equal(t, 1, a.EventsCount)
	require.Len(t, a.Events, 1)
	meta := map[string]string{}
	for _, m := range a.Events[0].Meta {
		meta[m.Key] = m.Value
	}
	host, _ := os.Hostname()
	require.Equal(t, "198.51.100.7", meta["source_ip"])
	require.Equal(t, testns.Dev, meta["interface"])
	require.Equal(t, "udp", meta["protocol"])
	require.Equal(t, "false", meta["verified"])
	require.Equal(t, host, meta["host"])
	require.Equal(t, "pps = 1000 for 2s", meta["over"])
	pps, err := strconv.ParseFloat(meta["pps"], 64)
	require.NoError(t, err)
	require.Greater(t, pps, 1000.0)
	bps, err := strconv.ParseFloat(meta["bytes_per_second"], 64)
	require.NoError(t, err)
	require.Greater(t, bps, pps, "bytes a second over frames a second")
}
