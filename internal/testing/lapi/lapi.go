// Package lapi runs a real CrowdSec Local API for tests: the crowdsec
// binary with a private configuration and SQLite database in the test's
// temporary directory, on a free port of 127.0.0.1, driven with cscli. The
// system's /etc/crowdsec and /var/lib/crowdsec are read from nowhere and
// written to never.
package lapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// wait bounds a start, a stop and one cscli call: far beyond what they take
// (the LAPI answers within a second of its start).
const wait = testns.Hang

// TB is what the LAPI needs of its owner: a *testing.T or *testing.B, or a
// command (the end-to-end run's) that fails and cleans up the same way.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
}

// LAPI is one crowdsec process serving the Local API, owned by one test.
type LAPI struct {
	t      TB
	dir    string
	config string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start runs a LAPI for t, killed when t ends. Without crowdsec installed
// the test is skipped, or fails under XDP_DROP_REQUIRE_PRIVILEGED=1.
func Start(t TB) *LAPI {
	t.Helper()
	for _, bin := range []string{"crowdsec", "cscli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv(testns.RequireEnv) == "1" {
				t.Fatalf("%s not found (install Debian's crowdsec package), and %s=1 forbids skipping", bin, testns.RequireEnv)
			}
			t.Skipf("%s not found: install Debian's crowdsec package to run the tests against a real LAPI", bin)
		}
	}
	l := &LAPI{t: t, dir: t.TempDir()}
	l.config = filepath.Join(l.dir, "config.yaml")
	t.Cleanup(func() {
		if t.Failed() {
			l.logTail()
		}
		l.Stop()
	})
	var err error
	// A free port can be taken between the probe and crowdsec's listen: retry.
	for try := 0; try < 5; try++ {
		if l.port, err = freePort(); err != nil {
			t.Fatalf("lapi: find a free port: %v", err)
		}
		if err = l.writeConfig(); err != nil {
			t.Fatalf("lapi: %v", err)
		}
		if try == 0 {
			// The machine cscli uses to add decisions; it writes to the DB directly.
			l.Cscli("machines", "add", "--auto", "--force", "-f", filepath.Join(l.dir, "local_api_credentials.yaml"))
		} else {
			l.rewriteCredentialsURL()
		}
		if err = l.start(); err == nil {
			return l
		}
	}
	t.Fatalf("lapi: %v", err)
	return nil
}

// URL is the LAPI's base URL, e.g. http://127.0.0.1:41234/.
func (l *LAPI) URL() string { return fmt.Sprintf("http://127.0.0.1:%d/", l.port) }

// Dir is the directory holding the configuration, database and logs.
func (l *LAPI) Dir() string { return l.dir }

// Config is the path of the private config.yaml (for cscli -c).
func (l *LAPI) Config() string { return l.config }

// AddBouncer registers a bouncer and returns its API key.
func (l *LAPI) AddBouncer(name string) string {
	l.t.Helper()
	key := strings.TrimSpace(l.Cscli("bouncers", "add", name, "-o", "raw"))
	if key == "" {
		l.t.Fatalf("lapi: cscli bouncers add %s printed no key", name)
	}
	return key
}

// AddDecision bans value (an address, or a prefix when it holds a "/") for d.
func (l *LAPI) AddDecision(value string, d time.Duration) {
	l.t.Helper()
	l.AddDecisionType(value, "ban", d)
}

// AddDecisionType adds a decision of type typ (ban, captcha...) on value for d.
func (l *LAPI) AddDecisionType(value, typ string, d time.Duration) {
	l.t.Helper()
	l.Cscli("decisions", "add", scopeFlag(value), value, "--type", typ, "--duration", d.String())
}

// DeleteDecision deletes every decision on value (an address or a prefix).
func (l *LAPI) DeleteDecision(value string) {
	l.t.Helper()
	l.Cscli("decisions", "delete", scopeFlag(value), value)
}

// DeleteDecisionID deletes one decision by its id.
func (l *LAPI) DeleteDecisionID(id int64) {
	l.t.Helper()
	l.Cscli("decisions", "delete", "--id", strconv.FormatInt(id, 10))
}

// AddMissedDecision bans value for d as the LAPI's delta stream misses
// it: made while the LAPI answers a bouncer's pull (after its query, before
// it records the pull), a decision is older than every bouncer's last pull,
// and only a full list (startup=true) brings it. A trigger of the LAPI's
// SQLite database dates the decision an hour back as cscli writes it.
func (l *LAPI) AddMissedDecision(value string, d time.Duration) {
	l.t.Helper()
	const trigger = "xdp_drop_missed"
	l.sqlite(fmt.Sprintf(`CREATE TRIGGER %s AFTER INSERT ON decisions BEGIN
  UPDATE decisions SET created_at = strftime('%%Y-%%m-%%d %%H:%%M:%%S+00:00', 'now', '-1 hour') WHERE id = NEW.id;
END;`, trigger))
	defer l.sqlite("DROP TRIGGER " + trigger + ";")
	l.AddDecision(value, d)
}

// sqlite runs statements on the LAPI's database with the sqlite3 shell,
// waiting up to 5 s for the LAPI's lock.
func (l *LAPI) sqlite(statements string) {
	l.t.Helper()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		if os.Getenv(testns.RequireEnv) == "1" {
			l.t.Fatalf("sqlite3 not found (install Debian's sqlite3 package), and %s=1 forbids skipping", testns.RequireEnv)
		}
		l.t.Skipf("sqlite3 not found: install Debian's sqlite3 package to change the LAPI's database")
	}
	cmd := testproc.Command("sqlite3", "-bail", "-cmd", ".timeout 5000", filepath.Join(l.dir, "data", "crowdsec.db"))
	cmd.Stdin = strings.NewReader(statements)
	l.run(cmd, "sqlite3")
}

// Decision is one line of a bulk import.
type Decision struct {
	Value    string        // an address, or a prefix when it holds a "/"
	Type     string        // "" means ban
	Duration time.Duration // > 0
}

// Import adds many decisions in one cscli call per scope (cscli decisions
// import), origin "cscli-import"; 100,000 take tens of seconds where
// cscli decisions add would take hours.
func (l *LAPI) Import(ds []Decision) {
	l.t.Helper()
	byScope := map[string][]importLine{}
	for _, d := range ds {
		scope := "Ip"
		if strings.Contains(d.Value, "/") {
			scope = "Range"
		}
		byScope[scope] = append(byScope[scope], d.line())
	}
	for _, scope := range []string{"Ip", "Range"} {
		if len(byScope[scope]) > 0 {
			l.importFile(scope, byScope[scope])
		}
	}
}

// ImportList imports ds as an operator imports a list, 'cscli decisions
// import -i <file>' with no --scope: cscli 1.4 gives every row scope Ip,
// ranges too.
func (l *LAPI) ImportList(ds []Decision) {
	l.t.Helper()
	lines := make([]importLine, 0, len(ds))
	for _, d := range ds {
		lines = append(lines, d.line())
	}
	l.importFile("", lines)
}

// importLine is one row of an import file.
type importLine struct {
	Duration string `json:"duration"`
	Type     string `json:"type"`
	Value    string `json:"value"`
	Reason   string `json:"reason"`
}

func (d Decision) line() importLine {
	typ := d.Type
	if typ == "" {
		typ = "ban"
	}
	return importLine{Duration: d.Duration.String(), Type: typ, Value: d.Value, Reason: "test-import"}
}

// importFile imports lines of one scope: cscli 1.4's --scope (default Ip)
// overrides the scope a line names, so each scope needs its own call; ""
// passes no --scope.
func (l *LAPI) importFile(scope string, lines any) {
	l.t.Helper()
	f, err := os.CreateTemp(l.dir, "import-*.json")
	if err != nil {
		l.t.Fatalf("lapi: %v", err)
	}
	defer os.Remove(f.Name())
	if err := json.NewEncoder(f).Encode(lines); err != nil {
		l.t.Fatalf("lapi: write %s: %v", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		l.t.Fatalf("lapi: write %s: %v", f.Name(), err)
	}
	if scope == "" {
		l.Cscli("decisions", "import", "-i", f.Name())
		return
	}
	l.Cscli("decisions", "import", "--scope", scope, "-i", f.Name())
}

// Cscli runs cscli against this LAPI's config and returns its stdout; a
// failure fails the test with cscli's output.
func (l *LAPI) Cscli(args ...string) string {
	l.t.Helper()
	full := append([]string{"-c", l.config, "--error"}, args...)
	cmd := testproc.Command("cscli", full...)
	cmd.Dir = l.dir
	return l.run(cmd, "cscli "+strings.Join(args, " "))
}

// run runs cmd, named what in its errors, and returns its stdout; a
// failure, or no exit within wait, fails the test with its output.
func (l *LAPI) run(cmd *exec.Cmd, what string) string {
	l.t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("lapi: %s: %v", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			l.t.Fatalf("lapi: %s: %v\n%s%s", what, err, out.String(), errOut.String())
		}
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		l.t.Fatalf("lapi: %s: no exit within %s", what, wait)
	}
	return out.String()
}

// Stop ends the LAPI (SIGTERM, then SIGKILL); the database is kept. Stopping
// a stopped LAPI does nothing.
func (l *LAPI) Stop() {
	if l.cmd == nil {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
		_ = l.cmd.Process.Kill()
		<-l.exited
	}
	l.cmd = nil
}

// Restart stops the LAPI if it runs and starts it again on the same port
// with the same database.
func (l *LAPI) Restart() {
	l.t.Helper()
	l.Stop()
	if err := l.start(); err != nil {
		l.t.Fatalf("lapi: restart: %v", err)
	}
}

// start runs crowdsec and waits until the API answers.
func (l *LAPI) start() error {
	cmd := exec.Command("crowdsec", "-no-cs", "-no-capi", "-c", l.config)
	cmd.Dir = l.dir
	out, err := os.OpenFile(filepath.Join(l.dir, "crowdsec.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a test binary killed mid-run does not take the terminal's signals to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := testproc.Tie(cmd).Start(); err != nil {
		return fmt.Errorf("start crowdsec: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	l.cmd, l.exited = cmd, exited

	deadline := time.Now().Add(wait)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			l.cmd = nil
			return fmt.Errorf("crowdsec exited at start (%s); its log:\n%s", cmd.ProcessState, l.tail())
		default:
		}
		// Any HTTP answer (403 without a key) means the API serves.
		resp, err := client.Get(l.URL() + "v1/decisions/stream")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.Stop()
	return fmt.Errorf("crowdsec did not answer on %s within %s; its log:\n%s", l.URL(), wait, l.tail())
}

func (l *LAPI) writeConfig() error {
	d := l.dir
	if err := os.WriteFile(filepath.Join(d, "simulation.yaml"), []byte("simulation: off\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "profiles.yaml"), []byte(profiles), 0o600); err != nil {
		return err
	}
	for _, sub := range []string{"data", "hub", "notifications"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o700); err != nil {
			return err
		}
	}
	cfg := strings.NewReplacer("@DIR@", d, "@PORT@", strconv.Itoa(l.port)).Replace(config)
	return os.WriteFile(l.config, []byte(cfg), 0o600)
}

// rewriteCredentialsURL points cscli's machine credentials at a new port.
func (l *LAPI) rewriteCredentialsURL() {
	p := filepath.Join(l.dir, "local_api_credentials.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		l.t.Fatalf("lapi: %v", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "url:") {
			line = "url: " + strings.TrimSuffix(l.URL(), "/")
		}
		out = append(out, line)
	}
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		l.t.Fatalf("lapi: %v", err)
	}
}

func (l *LAPI) tail() string {
	var b strings.Builder
	for _, name := range []string{"crowdsec.out", "crowdsec_api.log", "crowdsec.log"} {
		data, err := os.ReadFile(filepath.Join(l.dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s", name, data)
	}
	return b.String()
}

func (l *LAPI) logTail() { l.t.Logf("lapi logs in %s:\n%s", l.dir, l.tail()) }

func scopeFlag(value string) string {
	if strings.Contains(value, "/") {
		return "--range"
	}
	return "--ip"
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// config is /etc/crowdsec/config.yaml's LAPI part with every path in the
// test's directory, no Central API, no metrics port.
const config = `common:
  daemonize: false
  log_media: file
  log_level: info
  log_dir: @DIR@/
  working_dir: @DIR@
config_paths:
  config_dir: @DIR@/
  data_dir: @DIR@/data/
  simulation_path: @DIR@/simulation.yaml
  hub_dir: @DIR@/hub/
  index_path: @DIR@/hub/.index.json
  notification_dir: @DIR@/notifications/
  plugin_dir: /usr/lib/crowdsec/plugins/
cscli:
  output: human
  color: "no"
db_config:
  log_level: info
  type: sqlite
  db_path: @DIR@/data/crowdsec.db
  use_wal: true
plugin_config:
  user: nobody
  group: nogroup
api:
  client:
    insecure_skip_verify: false
    credentials_path: @DIR@/local_api_credentials.yaml
  server:
    log_level: info
    listen_uri: 127.0.0.1:@PORT@
    profiles_path: @DIR@/profiles.yaml
    trusted_ips:
      - 127.0.0.1
      - ::1
prometheus:
  enabled: false
`

// profiles is the package's default profile (only used for alerts the agent raises).
const profiles = `name: default_ip_remediation
filters:
 - Alert.Remediation == true && Alert.GetScope() == "Ip"
decisions:
 - type: ban
   duration: 4h
on_success: break
`
