package lapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// stream pulls the bouncer stream with key and returns new and deleted as "Scope:value".
func stream(t *testing.T, l *LAPI, key string, startup bool) (news, deleted []string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%sv1/decisions/stream?startup=%t", l.URL(), startup), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: HTTP %s", resp.Status)
	}
	var body struct {
		New, Deleted []struct{ Scope, Value string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, d := range body.New {
		news = append(news, d.Scope+":"+d.Value)
	}
	for _, d := range body.Deleted {
		deleted = append(deleted, d.Scope+":"+d.Value)
	}
	return news, deleted
}

// TestLAPIStartAddDeleteRestart checks the harness against the LAPI it runs:
// decisions added and deleted with cscli reach a bouncer, and a restart keeps them.
func TestLAPIStartAddDeleteRestart(t *testing.T) {
	l := Start(t)
	key := l.AddBouncer("harness")
	l.AddDecision("192.0.2.1", time.Hour)
	l.AddDecision("198.51.100.0/24", time.Hour)
	news, _ := stream(t, l, key, true)
	if len(news) != 2 {
		t.Fatalf("startup new = %v, want the 2 added", news)
	}
	l.DeleteDecision("192.0.2.1")
	l.Restart()
	news, deleted := stream(t, l, key, true)
	if len(news) != 1 || news[0] != "Range:198.51.100.0/24" || len(deleted) != 1 || deleted[0] != "Ip:192.0.2.1" {
		t.Fatalf("after delete and restart: new %v deleted %v, want new [Range:198.51.100.0/24] deleted [Ip:192.0.2.1]", news, deleted)
	}
}

// TestLAPIImport checks a bulk import reaches a bouncer whole, each decision with its scope.
func TestLAPIImport(t *testing.T) {
	l := Start(t)
	key := l.AddBouncer("import")
	var ds []Decision
	for i := 0; i < 1000; i++ {
		ds = append(ds, Decision{Value: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), Duration: time.Hour})
	}
	ds = append(ds, Decision{Value: "2001:db8::/32", Duration: time.Hour})
	start := time.Now()
	l.Import(ds)
	t.Logf("import of %d took %s", len(ds), time.Since(start))
	news, _ := stream(t, l, key, true)
	if len(news) != len(ds) {
		t.Fatalf("startup new holds %d decisions, want %d", len(news), len(ds))
	}
	seen := map[string]bool{}
	for _, n := range news {
		seen[n] = true
	}
	for _, want := range []string{"Ip:10.0.0.0", "Ip:10.0.3.231", "Range:2001:db8::/32"} {
		if !seen[want] {
			t.Errorf("decision %s missing from the startup answer", want)
		}
	}
}

// TestLAPIMissedDecision checks the harness's missed decision against the
// LAPI: a bouncer's deltas never bring it, while one made after it comes
// in the next delta, and a full list holds both.
func TestLAPIMissedDecision(t *testing.T) {
	l := Start(t)
	key := l.AddBouncer("missed")
	stream(t, l, key, true)
	stream(t, l, key, false)
	l.AddMissedDecision("192.0.2.1", time.Hour)
	l.AddDecision("192.0.2.2", time.Hour)
	if news, _ := stream(t, l, key, false); len(news) != 1 || news[0] != "Ip:192.0.2.2" {
		t.Fatalf("delta new = %v, want [Ip:192.0.2.2]: the missed one not in it", news)
	}
	if news, _ := stream(t, l, key, false); len(news) != 0 {
		t.Fatalf("second delta new = %v, want none", news)
	}
	if news, _ := stream(t, l, key, true); len(news) != 2 {
		t.Fatalf("full list new = %v, want both", news)
	}
}
