//go:build linux

package flowspec

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// speakerEnv marks the re-executed binary as the BGP speaker; the control
// socket is its descriptor 3.
const speakerEnv = "XDP_DROP_FLOWSPEC_SPEAKER"

// RunSpeakerIfRequested turns this process into the FlowSpec BGP speaker
// when StartSpeaker started it as one, and never returns then. Call it
// first in main (and in TestMain of tests that start speakers).
func RunSpeakerIfRequested() {
	if os.Getenv(speakerEnv) == "" {
		return
	}
	os.Unsetenv(speakerEnv)
	os.Exit(runSpeaker())
}

// speakerChild is the speaker process's side: a Receiver whose apply,
// log and local addresses are the plugin's, over the control socket.
type speakerChild struct {
	c     *conn
	r     *Receiver
	local atomic.Pointer[[]netip.Prefix]

	mu      sync.Mutex
	seq     uint64
	waiting map[uint64]chan *frame
	gate    uint64 // rules are reported once the receiver has decided past this
}

// applyWait bounds how long the speaker waits for the plugin to answer a
// rule set; past it the set is retried (the receiver's retry).
const applyWait = 30 * time.Second

func runSpeaker() int {
	// SIGINT from a terminal goes to the plugin, which stops this process.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	f := os.NewFile(3, "flowspec-control")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "flowspec speaker: control socket: %v\n", err)
		return 1
	}
	s := &speakerChild{c: &conn{c: fc.(*net.UnixConn)}, waiting: map[uint64]chan *frame{}}
	first, err := s.c.read(10 * time.Second)
	if err != nil || first.T != msgConfig || first.Config == nil {
		fmt.Fprintf(os.Stderr, "flowspec speaker: no configuration from the plugin: %v\n", err)
		return 1
	}
	local := first.Local
	s.local.Store(&local)
	cfg := first.Config.config()
	cfg.LocalPrefixes = func() []netip.Prefix { return *s.local.Load() }
	cfg.Log = s.log
	r, err := Start(cfg, s.apply)
	started := &frame{T: msgStarted}
	if err != nil {
		started.Err = err.Error()
	}
	if werr := s.c.write(started, 5*time.Second); werr != nil || err != nil {
		if r != nil {
			r.Stop()
		}
		return 1
	}
	s.r = r
	if len(first.Adopted) > 0 {
		s.adopt(first.Adopted)
	}
	go s.report()
	for {
		m, err := s.c.read(0)
		if err != nil {
			// The plugin stopped, or died: end the sessions, briefly.
			done := make(chan struct{})
			go func() { r.Stop(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Second):
			}
			return 0
		}
		switch m.T {
		case msgApplied:
			s.mu.Lock()
			ch := s.waiting[m.Seq]
			delete(s.waiting, m.Seq)
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case msgAdopt:
			s.adopt(m.Rules)
		case msgLocal:
			local := m.Local
			s.local.Store(&local)
			r.wake()
		}
	}
}

// adopt hands the rules to the receiver; the rules reported wait for the
// set decided with them.
func (s *speakerChild) adopt(rules []bpf.FlowRule) {
	s.r.mu.Lock()
	n := s.r.refreshes
	s.r.mu.Unlock()
	s.mu.Lock()
	s.gate = n
	s.mu.Unlock()
	s.r.Adopt(rules)
}

func (s *speakerChild) log(level byte, msg string) {
	_ = s.c.write(&frame{T: msgLog, Level: level, Msg: msg}, 5*time.Second)
}

// apply sends the set to the plugin and waits for its answer.
func (s *speakerChild) apply(rules []bpf.FlowRule) error {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	ch := make(chan *frame, 1)
	s.waiting[seq] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, seq)
		s.mu.Unlock()
	}()
	out := make([]bpf.FlowRule, len(rules))
	copy(out, rules)
	for i := range out {
		finite(&out[i])
	}
	if err := s.c.write(&frame{T: msgApply, Seq: seq, Rules: out}, 5*time.Second); err != nil {
		return fmt.Errorf("pass the rules to the plugin: %w", err)
	}
	select {
	case m := <-ch:
		switch {
		case m.Capacity:
			return &refusedError{msg: m.Err, ids: m.Refused}
		case m.Err != "":
			return errors.New(m.Err)
		}
		return nil
	case <-time.After(applyWait):
		return fmt.Errorf("the plugin did not answer within %v", applyWait)
	}
}

// report sends the rules whenever a refresh changed them, the peers when
// they change and every second regardless (the plugin takes silence for
// a stall).
func (s *speakerChild) report() {
	var sent []RuleState
	var sentPeers []PeerState
	reported, seen := false, uint64(0)
	const every = 20 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		s.r.mu.Lock()
		n := s.r.refreshes
		s.r.mu.Unlock()
		s.mu.Lock()
		ready := n > s.gate
		s.mu.Unlock()
		fresh := n != seen
		if ready && fresh {
			rules := s.r.Rules()
			if !reported || !reflect.DeepEqual(rules, sent) {
				out := make([]RuleState, len(rules))
				copy(out, rules)
				for j := range out {
					finite(&out[j].Rule)
				}
				if s.c.write(&frame{T: msgRules, States: out}, 5*time.Second) == nil {
					sent, reported, seen = rules, true, n
				}
			} else {
				seen = n
			}
		}
		if fresh || i%10 == 0 {
			peers := s.r.Peers()
			if i%50 == 0 || !samePeers(peers, sentPeers) {
				if s.c.write(&frame{T: msgPeers, Peers: peers}, 5*time.Second) == nil {
					sentPeers = peers
				}
			}
		}
		<-tick.C
	}
}

// samePeers: a and b differ in nothing but the uptimes.
func samePeers(a, b []PeerState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Uptime, y.Uptime = 0, 0
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
