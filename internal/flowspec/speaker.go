//go:build linux

package flowspec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Speaker runs the Receiver in a process of its own (this binary,
// re-executed: RunSpeakerIfRequested), so that GoBGP failing on what a
// peer sends (a panic in its decoder, in its own goroutines) ends that
// process, not the plugin's: the plugin keeps its programs and the rules
// in force, restarts the speaker with a backoff and hands it those rules
// as adopted, so they stay until its peers have sent theirs again.
//
// It has the Receiver's API. apply runs in this process, on the goroutine
// that reads the speaker, never concurrently.
type Speaker struct {
	cfg   Config
	apply func([]bpf.FlowRule) error

	mu      sync.Mutex
	child   *speakerProc // nil while none runs
	peers   []PeerState
	peersAt time.Time
	rules   []RuleState
	inForce []bpf.FlowRule // what the last successful apply, or Adopt, put in force
	local   []netip.Prefix // as last sent
	stopped bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// speakerProc is one speaker process.
type speakerProc struct {
	cmd    *exec.Cmd
	c      *conn
	exited chan struct{} // closed once reaped
	waitE  error
	stderr *tail
	since  time.Time
}

const (
	// startWait bounds the speaker's start: its first answer.
	startWait = 20 * time.Second
	writeWait = 2 * time.Second
	// backoff between restarts: 1 s, doubling to 30 s; a speaker that
	// ran for a minute starts the count again.
	backoffMin, backoffMax = time.Second, 30 * time.Second
)

// stallWait: a speaker silent this long (it reports its peers every
// second) is stalled, and killed (a variable for the tests).
var stallWait = 20 * time.Second

// StartSpeaker starts the speaker process and waits until it has started
// its sessions (the errors Start returns, it returns). The caller's
// thread's network namespace does not matter: the process is started from
// a thread of its own (spawner), in the process's network namespace.
func StartSpeaker(cfg Config, apply func(rules []bpf.FlowRule) error) (*Speaker, error) {
	check := cfg
	if err := check.check(); err != nil {
		return nil, err
	}
	s := &Speaker{cfg: cfg, apply: apply, stop: make(chan struct{}), done: make(chan struct{})}
	p, err := s.spawn(nil)
	if err != nil {
		return nil, err
	}
	s.child = p
	go s.supervise(p)
	return s, nil
}

// spawn starts a speaker process, hands it the config and adopted rules,
// and waits for its start.
func (s *Speaker) spawn(adopted []bpf.FlowRule) (*speakerProc, error) {
	type result struct {
		p   *speakerProc
		err error
	}
	ch := make(chan result, 1)
	spawnOnce.Do(func() { go spawner() })
	spawns <- func() {
		p, err := s.startProc()
		ch <- result{p, err}
	}
	res := <-ch
	if res.err != nil {
		return nil, res.err
	}
	p := res.p
	local := s.localNow()
	s.mu.Lock()
	s.local = local
	s.mu.Unlock()
	fail := func(err error) (*speakerProc, error) {
		p.kill()
		return nil, err
	}
	if err := p.c.write(&frame{T: msgConfig, Config: toWire(s.cfg), Adopted: adopted, Local: local}, writeWait); err != nil {
		return fail(fmt.Errorf("configure the BGP speaker: %w%s", err, p.stderr.summary()))
	}
	deadline := time.Now().Add(startWait)
	var m *frame
	for {
		var err error
		m, err = p.c.read(max(time.Until(deadline), time.Millisecond))
		if err == nil && m.T == msgLog {
			s.log(m.Level, m.Msg)
			continue
		}
		if err == nil && m.T != msgStarted {
			err = fmt.Errorf("%s before it started", quote.Value(m.T))
		}
		if err != nil {
			p.c.close()
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fail(fmt.Errorf("the BGP speaker did not start: %v (%v)%s", err, p.exitErr(err), p.stderr.summary()))
		}
		break
	}
	if m.Err != "" {
		return fail(errors.New(m.Err))
	}
	return p, nil
}

// startNS is the network namespace the process started in (init runs
// on the main thread before anything could move a thread elsewhere; the
// main thread itself may be moved later, so /proc/self is no reference).
var startNS struct{ dev, ino uint64 }

func init() {
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) == nil {
		startNS.dev, startNS.ino = st.Dev, st.Ino
	}
}

var (
	spawnOnce sync.Once
	spawns    = make(chan func())
)

// spawner starts the speaker processes on a thread of its own, locked to
// it for the life of the process: the speaker is killed when the thread
// that started it ends (Pdeathsig), and this one never does; and the
// speaker starts in that thread's network namespace, checked to be the
// one the process started in.
func spawner() {
	runtime.LockOSThread()
	for f := range spawns {
		f()
	}
}

// sameNetns: the calling thread is in the network namespace the process
// started in.
func sameNetns() error {
	var own unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &own); err != nil {
		return err
	}
	if startNS.ino != 0 && (own.Dev != startNS.dev || own.Ino != startNS.ino) {
		return errors.New("the starting thread is in another network namespace than the one the process started in")
	}
	return nil
}

func (s *Speaker) startProc() (*speakerProc, error) {
	if err := sameNetns(); err != nil {
		return nil, fmt.Errorf("start the BGP speaker process: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair for the BGP speaker: %w", err)
	}
	ours := os.NewFile(uintptr(pair[0]), "flowspec-control")
	theirs := os.NewFile(uintptr(pair[1]), "flowspec-control")
	defer ours.Close()
	defer theirs.Close()
	er, ew, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for the BGP speaker's stderr: %w", err)
	}
	cmd := exec.Command("/proc/self/exe")
	// Named apart in ps; the binary's flags do not apply to it.
	cmd.Args = []string{os.Args[0] + " [flowspec]"}
	cmd.Env = append(os.Environ(), speakerEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	// No stdout: inputs.execd reads the plugin's to its end. stderr comes
	// here. Its own process group: a terminal's signals reach the plugin,
	// which stops it; it dies with the plugin's thread that started it.
	cmd.Stderr = ew
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	ew.Close()
	if err != nil {
		er.Close()
		return nil, fmt.Errorf("start the BGP speaker process: %w", err)
	}
	p := &speakerProc{cmd: cmd, exited: make(chan struct{}), stderr: newTail(er), since: time.Now()}
	go func() {
		p.waitE = cmd.Wait()
		p.stderr.wait(time.Second)
		close(p.exited)
	}()
	fc, err := net.FileConn(ours)
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("control socket of the BGP speaker: %w", err)
	}
	p.c = &conn{c: fc.(*net.UnixConn)}
	return p, nil
}

func (p *speakerProc) kill() {
	_ = p.cmd.Process.Kill()
	if p.c != nil {
		p.c.close()
	}
	<-p.exited
}

// exitErr says how the process ended, or err if it has not.
func (p *speakerProc) exitErr(err error) string {
	select {
	case <-p.exited:
		if p.waitE != nil {
			return p.waitE.Error()
		}
		return "exited"
	default:
		return err.Error()
	}
}

// supervise serves the speaker until it ends, then restarts one, until
// Stop.
func (s *Speaker) supervise(p *speakerProc) {
	defer close(s.done)
	backoff := backoffMin
	for {
		why, ours := s.serve(p)
		p.kill()
		s.mu.Lock()
		s.child, s.peers = nil, nil
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return
		}
		if time.Since(p.since) > time.Minute {
			backoff = backoffMin
		}
		what := p.exitErr(errors.New(why))
		if ours { // this process ended it
			what = why
		}
		if report := p.stderr.report(); report != "" {
			what = report + " (" + what + ")"
		}
		s.log('E', fmt.Sprintf("flowspec: the BGP speaker died: %s; restarting in %v; the rules in force stay", what, backoff))
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, backoffMax)
			s.mu.Lock()
			adopted := append([]bpf.FlowRule(nil), s.inForce...)
			s.mu.Unlock()
			np, err := s.spawn(adopted)
			if err == nil {
				s.mu.Lock()
				if s.stopped {
					s.mu.Unlock()
					np.kill()
					return
				}
				s.child = np
				s.mu.Unlock()
				s.log('I', fmt.Sprintf("flowspec: the BGP speaker restarted (process %d); %d rules in force kept until its peers send theirs", np.cmd.Process.Pid, len(adopted)))
				p = np
				break
			}
			s.log('E', fmt.Sprintf("flowspec: restarting the BGP speaker: %v; again in %v; the rules in force stay", err, backoff))
		}
	}
}

// serve reads the speaker's messages until it ends; it returns why, and
// whether it is this side that gave up on it.
func (s *Speaker) serve(p *speakerProc) (string, bool) {
	quit := make(chan struct{})
	defer close(quit)
	go s.pushLocal(p, quit)
	for {
		m, err := p.c.read(stallWait)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Sprintf("stalled (nothing from it for %v), killed", stallWait), true
			}
			if errors.Is(err, errFrameSize) {
				return fmt.Sprintf("sent a %v, killed", err), true
			}
			return err.Error(), false
		}
		switch m.T {
		case msgApply:
			reply := &frame{T: msgApplied, Seq: m.Seq}
			err := s.apply(m.Rules)
			var capErr capacityError
			switch {
			case err == nil:
				s.setInForce(m.Rules, nil)
			case errors.As(err, &capErr):
				reply.Capacity, reply.Refused, reply.Err = true, capErr.RefusedIDs(), err.Error()
				s.setInForce(m.Rules, capErr.RefusedIDs())
			default:
				reply.Err = err.Error()
			}
			if err := p.c.write(reply, writeWait); err != nil {
				return fmt.Sprintf("not reading (answering its rule set: %v), killed", err), true
			}
		case msgPeers:
			s.mu.Lock()
			s.peers, s.peersAt = m.Peers, time.Now()
			s.mu.Unlock()
		case msgRules:
			s.mu.Lock()
			s.rules = m.States
			s.mu.Unlock()
		case msgLog:
			msg := m.Msg
			if len(msg) > 4096 {
				msg = msg[:4096] + "…"
			}
			s.log(m.Level, msg)
		}
	}
}

func (s *Speaker) setInForce(rules []bpf.FlowRule, refused []string) {
	out := make([]bpf.FlowRule, 0, len(rules))
	no := map[string]bool{}
	for _, id := range refused {
		no[id] = true
	}
	for _, r := range rules {
		if !no[r.ID] {
			out = append(out, r)
		}
	}
	s.mu.Lock()
	s.inForce = out
	s.mu.Unlock()
}

// pushLocal sends the namespace's addresses whenever they change.
func (s *Speaker) pushLocal(p *speakerProc, quit chan struct{}) {
	if s.cfg.LocalPrefixes == nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-quit:
			return
		case <-tick.C:
		}
		now := s.localNow()
		s.mu.Lock()
		same := reflect.DeepEqual(now, s.local)
		s.mu.Unlock()
		if same {
			continue
		}
		if p.c.write(&frame{T: msgLocal, Local: now}, writeWait) == nil {
			s.mu.Lock()
			s.local = now
			s.mu.Unlock()
		}
	}
}

func (s *Speaker) localNow() []netip.Prefix {
	if s.cfg.LocalPrefixes == nil {
		return nil
	}
	return append([]netip.Prefix(nil), s.cfg.LocalPrefixes()...)
}

func (s *Speaker) log(level byte, msg string) {
	if s.cfg.Log != nil {
		s.cfg.Log(level, msg)
	}
}

// Adopt hands the speaker the rules a predecessor put in force (call it
// right after StartSpeaker); see Receiver.Adopt.
func (s *Speaker) Adopt(rules []bpf.FlowRule) {
	s.mu.Lock()
	s.inForce = append([]bpf.FlowRule(nil), rules...)
	p := s.child
	s.mu.Unlock()
	if p != nil {
		// A speaker that cannot take it is stalled: its reader notices.
		_ = p.c.write(&frame{T: msgAdopt, Rules: rules}, writeWait)
	}
}

// Peers reports each configured peer: idle, down, while no speaker runs.
func (s *Speaker) Peers() []PeerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PeerState, 0, len(s.cfg.Peers))
	known := map[netip.Addr]PeerState{}
	for _, p := range s.peers {
		known[p.Address] = p
	}
	for _, p := range s.cfg.Peers {
		ps, ok := known[p.Address]
		switch {
		case !ok:
			ps = PeerState{Address: p.Address, Port: portOr179(p.Port), State: "idle"}
		case s.child == nil:
			ps = PeerState{Address: p.Address, Port: portOr179(p.Port), State: "idle", LastUpdate: ps.LastUpdate}
		case ps.Up:
			ps.Uptime += time.Since(s.peersAt)
		}
		refused := map[string]int{}
		for k, v := range ps.Refused {
			refused[k] = v
		}
		ps.Refused = refused
		out = append(out, ps)
	}
	return out
}

// Rules reports every rule received (Receiver.Rules): the last the
// speaker reported, kept while it restarts.
func (s *Speaker) Rules() []RuleState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RuleState(nil), s.rules...)
}

// PID is the speaker process's, 0 while none runs.
func (s *Speaker) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.child == nil {
		return 0
	}
	return s.child.cmd.Process.Pid
}

// Stop ends the speaker (its sessions closed with a CEASE to each peer)
// and waits for its process to exit; apply is not called once Stop has
// returned.
func (s *Speaker) Stop() {
	s.once.Do(func() {
		s.mu.Lock()
		s.stopped = true
		p := s.child
		s.mu.Unlock()
		close(s.stop)
		if p != nil {
			// Its control socket's end makes it close its sessions and exit.
			p.c.c.CloseWrite()
			select {
			case <-p.exited:
			case <-time.After(3 * time.Second):
			}
			p.kill()
		}
		<-s.done
	})
}

// tail keeps the last lines of the speaker's stderr (a panic's report).
type tail struct {
	mu    sync.Mutex
	lines []string
	eof   chan struct{}
}

const tailLines, tailLine = 64, 512

func newTail(r io.ReadCloser) *tail {
	t := &tail{eof: make(chan struct{})}
	go func() {
		defer close(t.eof)
		defer r.Close()
		br := bufio.NewReaderSize(r, 4096)
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				l := strings.TrimRight(string(line[:min(len(line), tailLine)]), "\n")
				t.mu.Lock()
				if len(t.lines) == tailLines {
					t.lines = t.lines[1:]
				}
				t.lines = append(t.lines, l)
				t.mu.Unlock()
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return
			}
		}
	}()
	return t
}

func (t *tail) wait(d time.Duration) {
	select {
	case <-t.eof:
	case <-time.After(d):
	}
}

// summary is ": " and the report, or "".
func (t *tail) summary() string {
	if r := t.report(); r != "" {
		return ": " + r
	}
	return ""
}

// report is that of a panic or fatal error (the error and the first
// frames of the goroutine that raised it), else the last lines; "" when
// there were none.
func (t *tail) report() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, l := range t.lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return strings.Join(append([]string{l}, frames(t.lines[i+1:], 3)...), " | ")
		}
	}
	var keep []string
	for _, l := range t.lines[max(len(t.lines)-3, 0):] {
		if l = strings.TrimSpace(l); l != "" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, " | ")
}

// frames reads up to n stack frames of a goroutine's trace as
// "pkg.func (file.go:line)".
func frames(lines []string, n int) []string {
	var out []string
	for i := 0; i+1 < len(lines) && len(out) < n; i++ {
		fn, at := lines[i], strings.TrimSpace(lines[i+1])
		if strings.HasPrefix(fn, "goroutine ") || fn == "" || !strings.HasPrefix(at, "/") {
			continue
		}
		if j := strings.LastIndexByte(fn, '('); j > 0 && strings.HasSuffix(fn, ")") {
			fn = fn[:j]
		}
		if j := strings.LastIndexByte(fn, '/'); j >= 0 {
			fn = fn[j+1:]
		}
		if j := strings.Index(at, " +0x"); j >= 0 {
			at = at[:j]
		}
		if j := strings.LastIndexByte(at, '/'); j >= 0 {
			at = at[j+1:]
		}
		out = append(out, fn+" ("+at+")")
		i++
	}
	return out
}
