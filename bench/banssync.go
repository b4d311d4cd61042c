//go:build linux

package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"time"

	tgconfig "github.com/influxdata/telegraf/config"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// Targets of the startup sync row, as issue and BENCHMARKS.md state them.
const (
	targetBanSync    = 5 * time.Second
	targetBanSyncRSS = 50 << 10 // kB
	banSyncCount     = 100_000
)

// banSync is the startup sync row: the plugin, started with a feed whose
// startup answer holds banSyncCount decisions, until they are in force.
type banSync struct {
	took      time.Duration // Start to the gather that reports them in force
	active    int64
	rssGrowKB int64 // the bench process's RSS after, less before Start
	bodyBytes int
}

// startupAnswer is a decisions stream answer as the LAPI writes it:
// banSyncCount new decisions, half Ip and half Range, both families.
func startupAnswer() []byte {
	var b bytes.Buffer
	b.WriteString(`{"deleted":null,"new":[`)
	for i := range banSyncCount {
		if i > 0 {
			b.WriteByte(',')
		}
		scope, value, j := "Ip", "", i/4 // j < 65,536: every value apart
		switch i % 4 {
		case 0:
			value = fmt.Sprintf("10.0.%d.%d", byte(j>>8), byte(j))
		case 1:
			value = fmt.Sprintf("2001:db8::%x", j)
		case 2:
			scope, value = "Range", fmt.Sprintf("100.%d.%d.0/24", byte(j>>8), byte(j))
		case 3:
			scope, value = "Range", fmt.Sprintf("2001:db8:1:%x::/64", j)
		}
		fmt.Fprintf(&b, `{"duration":"23h59m58.795288745s","id":%d,"origin":"cscli","scenario":"manual 'ban' from 'bench'","scope":%q,"type":"ban","value":%q}`,
			i+1, scope, value)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// bansStartupSync measures a cold start's sync of banSyncCount decisions
// through the plugin itself: its client, its bookkeeping and the ban maps.
func bansStartupSync(e *env) (banSync, error) {
	var r banSync
	body := startupAnswer()
	r.bodyBytes = len(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.URL.Query().Get("startup") == "true" {
			w.Write(body)
			return
		}
		w.Write([]byte(`{"deleted":null,"new":null}`))
	}))
	defer srv.Close()

	x := xdp_drop.New()
	x.Interfaces, x.Drop, x.Log, x.HandoverTimeout = []string{testns.Dev}, []any{}, quietLogger{}, 0
	x.Bans = &xdp_drop.BansConfig{CrowdSec: &xdp_drop.CrowdSecConfig{
		URL: srv.URL, APIKey: "bench-bouncer-key", Interval: tgconfig.Duration(time.Second),
	}}
	if err := x.Init(); err != nil {
		return r, err
	}
	acc := &discardAccumulator{}
	err := e.ns.Do(func() error {
		if err := e.ns.CheckAttachable(testns.Dev); err != nil {
			return err
		}
		// The sections before leave garbage the heap has not given back
		// yet: return it, so that the growth below is the sync's.
		debug.FreeOSMemory()
		before := rssKB()
		start := time.Now()
		if err := x.Start(acc); err != nil {
			return err
		}
		defer x.Stop()
		for deadline := start.Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			x.Reconcile(acc)
			snap := x.Snapshot(acc)
			if len(snap.Bans) > 0 && snap.Bans[0].Synced > 0 {
				r.took, r.active = time.Since(start), snap.Bans[0].Active
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("startup sync: %d decisions not in force after a minute", banSyncCount)
			}
		}
		debug.FreeOSMemory()
		r.rssGrowKB = rssKB() - before
		if r.active != banSyncCount {
			return fmt.Errorf("startup sync: %d bans in force, want %d", r.active, banSyncCount)
		}
		return acc.err()
	})
	return r, err
}
