//go:build linux

// Command lapifeed runs the end-to-end run's CrowdSec feed: a real LAPI
// (crowdsec -no-cs, internal/testing/lapi: its own config, SQLite database
// and port under -dir), a bouncer whose key it writes to -key_file, and a
// decision of type ban for each -ban value. It prints, as JSON, the LAPI's
// URL once the decisions are in, then serves until SIGTERM or SIGINT, and
// stops the LAPI. Like the traffic tools it must run
// inside the run's own network namespace (ip netns exec NS lapifeed -netns
// NS ...), where the plugin reaches the LAPI on 127.0.0.1; it refuses any
// other.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/testing/lapi"
	"github.com/xdp-drop/xdp_drop/test/e2e/internal/e2ens"
)

// Report is what lapifeed prints once the LAPI serves the decisions.
type Report struct {
	URL       string   `json:"url"`
	KeyFile   string   `json:"key_file"`
	Decisions []string `json:"decisions"`
}

// fatal ends the command: what lapi.Start and the LAPI's calls report a
// failure with. The cleanups (the LAPI's stop) run first.
type fatal struct{ msg string }

// owner is the lapi.TB of a command: failures end it, cleanups run at its end.
type owner struct {
	dir      string
	cleanups []func()
	failed   bool
	temp     int
}

func (o *owner) Helper()                    {}
func (o *owner) Logf(f string, args ...any) { fmt.Fprintf(os.Stderr, "lapifeed: "+f+"\n", args...) }
func (o *owner) Fatalf(f string, args ...any) {
	o.failed = true
	panic(fatal{fmt.Sprintf(f, args...)})
}
func (o *owner) Skipf(f string, args ...any) { o.Fatalf(f, args...) }
func (o *owner) Cleanup(f func())            { o.cleanups = append(o.cleanups, f) }
func (o *owner) Failed() bool                { return o.failed }
func (o *owner) TempDir() string {
	o.temp++
	d := fmt.Sprintf("%s/%d", o.dir, o.temp)
	if err := os.MkdirAll(d, 0o700); err != nil {
		o.Fatalf("lapifeed: %v", err)
	}
	return d
}

// done runs the cleanups, the last registered first.
func (o *owner) done() {
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		o.cleanups[i]()
	}
	o.cleanups = nil
}

// bans is the repeatable -ban flag.
type bans []string

func (b *bans) String() string     { return strings.Join(*b, ",") }
func (b *bans) Set(v string) error { *b = append(*b, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lapifeed:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	netns := flag.String("netns", "", "name of the network namespace this runs in (required, as ip netns names it)")
	dir := flag.String("dir", "", "directory for the LAPI's config, database and logs (required; created)")
	keyFile := flag.String("key_file", "", "file to write the bouncer's key to, mode 0600 (required)")
	duration := flag.Duration("duration", time.Hour, "duration of each ban")
	var values bans
	flag.Var(&values, "ban", "address or prefix to ban (repeatable)")
	flag.Parse()
	if *netns == "" || *dir == "" || *keyFile == "" {
		flag.Usage()
		return errors.New("-netns, -dir and -key_file are required")
	}
	if err := e2ens.CheckNetns(*netns); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}

	o := &owner{dir: *dir}
	defer o.done()
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = errors.New(f.msg)
		}
	}()
	// Signals from here on stop the LAPI through the cleanups.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	l := lapi.Start(o)
	o.Logf("LAPI on %s, its files in %s", l.URL(), l.Dir())
	key := l.AddBouncer("xdp-drop-e2e")
	if err := os.WriteFile(*keyFile, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	for _, v := range values {
		l.AddDecision(v, *duration)
	}
	if err := json.NewEncoder(os.Stdout).Encode(Report{URL: l.URL(), KeyFile: *keyFile, Decisions: values}); err != nil {
		return err
	}

	<-stop
	return nil
}
