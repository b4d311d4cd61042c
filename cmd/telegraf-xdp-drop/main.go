// Command telegraf-xdp-drop runs the xdp_drop input plugin under Telegraf's
// inputs.execd: it attaches an XDP drop program to the interfaces in its
// config and prints per-protocol drop and pass counters as line protocol.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/influxdata/telegraf/plugins/common/shim"

	"github.com/xdp-drop/xdp_drop/internal/flowspec"
	"github.com/xdp-drop/xdp_drop/internal/handover"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

func main() {
	// A stopping instance re-executes this binary to hold its attachments
	// for a successor: that process does only that.
	handover.RunHolderIfRequested()
	// The FlowSpec BGP speaker runs in a process of its own, this binary.
	flowspec.RunSpeakerIfRequested()
	if os.Getenv("GOGC") == "" {
		// Loading a program per interface makes short-lived garbage (ELF and
		// BTF parsing); collecting it sooner keeps the agent's peak RSS low,
		// and the process is idle between gathers.
		debug.SetGCPercent(25)
	}
	code := run()
	closePipes()
	os.Exit(code)
}

// closePipes closes stdout and stderr before the process exits and, when
// they are pipes, gives the reader a moment to see their end: inputs.execd
// closes its ends as soon as the process is gone, and a reader still busy
// with the last lines (the stop's log) then logs "file already closed" as
// an error.
func closePipes() {
	st, err := os.Stderr.Stat()
	pipe := err == nil && st.Mode()&os.ModeNamedPipe != 0
	os.Stdout.Close()
	os.Stderr.Close()
	if pipe {
		time.Sleep(100 * time.Millisecond)
	}
}

// handoverInstance names the instance a config file runs, for handover:
// the hash of the file's absolute path, symbolic links resolved. With the
// user (the handover directory is the user's), it is what makes a process
// the successor of a stopped one: the same config file run by the same user.
func handoverInstance(configFile string) string {
	path, err := filepath.Abs(configFile)
	if err != nil {
		path = configFile
	}
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	sum := sha256.Sum256([]byte(path))
	return hex.EncodeToString(sum[:8])
}

func run() int {
	configFile := flag.String("config", "", "path to the plugin's config file (one [[inputs.xdp_drop]] section)")
	pollInterval := flag.Duration("poll_interval", time.Second, "how often to gather and print metrics")
	pollDisabled := flag.Bool("poll_interval_disabled", false,
		"gather only when a line arrives on stdin (inputs.execd with signal = \"STDIN\")")
	debug := flag.Bool("debug", false, "log debug messages")
	watchView := flag.Bool("watch", false, "attach per the config and print drops/s and passes/s per interface, protocol and rule every second until Ctrl-C, instead of line protocol; "+
		"an interface a running instance holds is shown read-only, from its program (as root)")
	checkOnly := flag.Bool("check", false, checkUsage)
	checkLAPIFlag := flag.Bool("check-lapi", false, checkLAPIUsage)
	statusView := flag.Bool("status", false, "print, once, what the running instance of the config has in force: per interface its program, mode and who holds it; "+
		"per rule what it matches, its hits and its prefix files; read-only, attaches nothing (as root); exit status 1 when an interface is not held")
	jsonOut := flag.Bool("json", false, "with -status: print it as JSON")
	showVersion := flag.Bool("version", false, "print the version, the commit and the Go and cilium/ebpf versions, and exit")
	flag.Parse()
	if *showVersion {
		printVersion(os.Stdout)
		return 0
	}
	if *pollDisabled {
		*pollInterval = shim.PollIntervalDisabled
	}
	if err := checkViews(*statusView, *watchView, *jsonOut); err != nil {
		fmt.Fprintf(os.Stderr, "E! %v\n", err)
		return 2
	}

	log, err := setupLogging(os.Stderr, *debug)
	if err != nil {
		fmt.Fprintf(os.Stderr, "E! set up logging: %v\n", err)
		return 1
	}
	if err := raiseFDLimit(); err != nil {
		log.Warnf("%v", err)
	}
	if *configFile == "" {
		log.Errorf("-config is required: pass the plugin's config file, e.g. -config /etc/telegraf-xdp-drop/xdp_drop.conf")
		return 2
	}
	if *checkLAPIFlag && !*checkOnly {
		log.Errorf("-check-lapi goes with -check: telegraf-xdp-drop -config FILE -check -check-lapi")
		return 2
	}
	if *checkOnly {
		return check(*configFile, os.Stdout, log, *checkLAPIFlag)
	}
	trustUID := noTrustCheck
	caps := raisedCapabilities()
	if caps != "" {
		trustUID = os.Getuid()
	}
	plugin, conf, err := readConfig(*configFile, trustUID)
	var untrusted *untrustedError
	switch {
	case errors.As(err, &untrusted):
		log.Errorf("config %s: refusing to run with %s: %v", *configFile, caps, err)
		return 1
	case plugin == nil && err != nil:
		log.Errorf("%v", err)
		return 1
	case err != nil:
		conf.report(log, err)
		return 1
	}
	if trustUID != noTrustCheck {
		plugin.TrustPrefixFiles(trustUID)
	}
	log.Debugf("config %s: interfaces %s, mode %s, drop %v", *configFile, quote.List(plugin.Interfaces), quote.Value(plugin.Mode), plugin.Drop)
	plugin.Run.HandoverInstance = handoverInstance(*configFile)
	plugin.Run.Version = binaryVersion()

	if *statusView {
		return runStatus(plugin, *configFile, *jsonOut, os.Stdout, log)
	}
	if *watchView {
		plugin.Log = log
		// The console view promises that Ctrl-C detaches: no handover.
		plugin.HandoverTimeout = 0
		// Beside a running instance it shows that instance's counters.
		plugin.Run.Observe = true
		if err := plugin.Init(); err != nil {
			conf.report(log, err)
			return 1
		}
		if err := watch(plugin, os.Stdout, time.Second, log); err != nil {
			log.Errorf("%v", err)
			return 1
		}
		return 0
	}

	return serve(plugin, conf, *pollInterval, log)
}
