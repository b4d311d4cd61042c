//go:build linux

package flowspec

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testproc"
)

// speakerParentEnv makes the test binary a plugin that starts a speaker,
// prints its pid and waits to be killed.
const speakerParentEnv = "XDP_DROP_TEST_SPEAKER_PARENT"

func runSpeakerParent() {
	s, err := StartSpeaker(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.3"), Port: 9, PeerAS: 65000}},
	}, func([]bpf.FlowRule) error { return nil })
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.PID())
	select {}
}

// logLines records the speaker's log lines.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) log(level byte, msg string) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf("%c! %s", level, msg))
	l.mu.Unlock()
}

func (l *logLines) find(sub string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, sub) {
			return x
		}
	}
	return ""
}

func (l *logLines) dump() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		l.t.Log(x)
	}
}

// watchRules samples Rules() every 2 ms from the first non-empty report
// on, and counts the samples that had no rule or lacked id.
type ruleWatch struct {
	stop            chan struct{}
	done            chan struct{}
	samples, misses atomic.Int64
}

func watchRules(s *Speaker, id string) *ruleWatch {
	w := &ruleWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			found := false
			for _, r := range s.Rules() {
				found = found || (r.Rule.ID == id && r.Refused == "")
			}
			w.samples.Add(1)
			if !found {
				w.misses.Add(1)
			}
		}
	}()
	return w
}

func (w *ruleWatch) end() (int64, int64) {
	close(w.stop)
	<-w.done
	return w.samples.Load(), w.misses.Load()
}

// everyApplyHas: each set applied since index from holds id.
func (a *applied) everyApplyHas(from int, id string) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, set := range a.sets[from:] {
		has := false
		for _, r := range set {
			has = has || r.ID == id
		}
		if !has {
			return len(a.sets) - from, false
		}
	}
	return len(a.sets) - from, true
}

func startSpeakerRaw(t *testing.T) (*Speaker, *applied, *logLines, func() *rawPeer) {
	t.Helper()
	_, port, accept := startRawPeer(t)
	a, l := &applied{}, &logLines{t: t}
	s, err := StartSpeaker(Config{
		LocalAS: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.3"), Port: port, PeerAS: 65000}},
		Log:   l.log,
	}, a.apply)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			l.dump()
		}
	})
	return s, a, l, accept
}

func waitSpeakerUp(t *testing.T, s *Speaker, up bool) {
	t.Helper()
	waitFor(t, 15*time.Second, fmt.Sprintf("peer up %v", up), func() bool {
		ps := s.Peers()
		return len(ps) == 1 && ps[0].Up == up
	})
}

// TestSpeakerSurvivesMalformed: the UPDATEs that make GoBGP panic end the
// speaker process, not this one; the rule in force before stays in force
// (every set applied holds it, Rules() never lacks it), the speaker is
// restarted and its session comes back.
func TestSpeakerSurvivesMalformed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		afi   uint16
		nlri  []byte
		panic string
	}{
		// An operator claiming an 8-octet value, 1 octet present.
		{"short value", 1, nlri(dst4("192.0.2.10", 32), []byte{3, 0xb1, 6}), "panic: runtime error: slice bounds out of range"},
		// An IPv6 prefix component cut after its length octet.
		{"short IPv6 prefix", 2, nlri([]byte{3, 0x81, 6}, []byte{1, 64}), "panic: runtime error: index out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, a, l, accept := startSpeakerRaw(t)
			p := accept()
			waitSpeakerUp(t, s, true)
			pid := s.PID()
			require.NotZero(t, pid)
			p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.9", 32)))
			id := a.waitRules(t, 2*time.Second, 1)[0].ID
			waitFor(t, 2*time.Second, "the rule reported", func() bool { return len(s.Rules()) == 1 })
			from := len(a.sets) - 1
			w := watchRules(s, id)

			p.announce(tc.afi, [][8]byte{discardEC}, tc.nlri)
			waitFor(t, 5*time.Second, "the speaker's death logged", func() bool { return l.find("the BGP speaker died") != "" })
			died := l.find("the BGP speaker died")
			t.Log(died)
			require.Contains(t, died, tc.panic)
			require.Contains(t, died, "DecodeFromBytes")
			require.Contains(t, died, "restarting in 1s; the rules in force stay")
			require.True(t, processGone(pid), "the speaker process %d is gone", pid)
			waitSpeakerUp(t, s, false)

			// The successor connects; the peer sends its table again.
			p = accept()
			waitSpeakerUp(t, s, true)
			require.NotEqual(t, pid, s.PID())
			require.NotEmpty(t, l.find("the BGP speaker restarted"))
			p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.9", 32)))
			time.Sleep(2500 * time.Millisecond) // past the adoption's quiet second
			samples, misses := w.end()
			t.Logf("Rules() sampled %d times", samples)
			n, ok := a.everyApplyHas(from, id)
			require.True(t, ok, "a set applied without the rule (%d sets)", n)
			require.Zero(t, misses, "Rules() lacked the rule in %d of %d samples", misses, samples)
			require.Equal(t, []string{id}, ids(a.last()))
			require.Equal(t, 1, s.Peers()[0].Accepted)
		})
	}
}

// TestSpeakerKilled: a speaker killed (SIGKILL) is restarted; meanwhile
// its peer is reported down and the rules stay in force.
func TestSpeakerKilled(t *testing.T) {
	s, a, l, accept := startSpeakerRaw(t)
	p := accept()
	waitSpeakerUp(t, s, true)
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.9", 32)))
	id := a.waitRules(t, 2*time.Second, 1)[0].ID
	waitFor(t, 2*time.Second, "the rule reported", func() bool { return len(s.Rules()) == 1 })
	from := len(a.sets) - 1
	w := watchRules(s, id)
	pid := s.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waitFor(t, 5*time.Second, "the death logged", func() bool { return l.find("the BGP speaker died") != "" })
	require.Contains(t, l.find("the BGP speaker died"), "signal: killed")
	waitSpeakerUp(t, s, false)
	require.Equal(t, "idle", s.Peers()[0].State)
	p = accept()
	waitSpeakerUp(t, s, true)
	require.NotEqual(t, pid, s.PID())
	p.announce(1, [][8]byte{discardEC}, nlri(dst4("192.0.2.9", 32)))
	time.Sleep(2500 * time.Millisecond)
	samples, misses := w.end()
	n, ok := a.everyApplyHas(from, id)
	require.True(t, ok, "a set applied without the rule (%d sets)", n)
	require.Zero(t, misses, "Rules() lacked the rule in %d of %d samples", misses, samples)
	require.Equal(t, []string{id}, ids(a.last()))
}

// TestSpeakerAdoptedKeptAcrossRestart: rules handed over (Adopt) stay in
// force across a speaker's restart while its peer is down.
func TestSpeakerAdoptedKeptAcrossRestart(t *testing.T) {
	s, a, l, _ := startSpeakerRaw(t)
	handed := ntpFlowRule()
	handed.ID, handed.Text = "handed", "destination 192.0.2.10/32 then discard"
	s.Adopt([]bpf.FlowRule{handed})
	waitFor(t, 2*time.Second, "the adopted rule reported", func() bool { return len(s.Rules()) == 1 })
	w := watchRules(s, "handed")
	pid := s.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waitFor(t, 5*time.Second, "restarted", func() bool { return s.PID() != 0 && s.PID() != pid })
	require.NotEmpty(t, l.find("1 rules in force kept"))
	time.Sleep(500 * time.Millisecond)
	samples, misses := w.end()
	require.Zero(t, misses, "Rules() lacked the rule in %d of %d samples", misses, samples)
	require.Equal(t, "destination 192.0.2.10/32 then discard", s.Rules()[0].Text)
	require.Zero(t, a.calls, "the adopted rules are in force: nothing to apply")
}

// TestSpeakerStalled: a speaker that stops answering (SIGSTOP) is killed
// after stallWait and restarted; Peers and Rules answer meanwhile, from
// what it reported last; the rules stay.
func TestSpeakerStalled(t *testing.T) {
	defer func(d time.Duration) { stallWait = d }(stallWait)
	stallWait = 2 * time.Second
	s, a, l, _ := startSpeakerRaw(t)
	handed := ntpFlowRule()
	handed.ID = "handed"
	s.Adopt([]bpf.FlowRule{handed})
	waitFor(t, 2*time.Second, "the adopted rule reported", func() bool { return len(s.Rules()) == 1 })
	pid := s.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	calls := 0
	waitFor(t, 10*time.Second, "the stall logged", func() bool {
		require.Len(t, s.Rules(), 1)
		require.Len(t, s.Peers(), 1)
		calls++
		return l.find("the BGP speaker died: stalled (nothing from it for 2s), killed") != ""
	})
	t.Logf("Peers and Rules answered %d times while it was stalled", calls)
	require.True(t, processGone(pid), "the stalled process %d is gone", pid)
	waitFor(t, 5*time.Second, "restarted", func() bool { return s.PID() != 0 })
	require.Zero(t, a.calls)
}

// TestSpeakerStops: Stop ends the process; a plugin killed takes its
// speaker with it.
func TestSpeakerStops(t *testing.T) {
	t.Run("Stop", func(t *testing.T) {
		s, _, _, _ := startSpeakerRaw(t)
		pid := s.PID()
		require.False(t, processGone(pid))
		s.Stop()
		require.True(t, processGone(pid), "process %d left", pid)
		require.Zero(t, s.PID())
	})
	t.Run("plugin killed", func(t *testing.T) {
		cmd := testproc.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), speakerParentEnv+"=1")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		require.NoError(t, err, "the plugin said %q", line)
		require.False(t, processGone(pid))
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		waitFor(t, 5*time.Second, fmt.Sprintf("speaker %d gone", pid), func() bool { return processGone(pid) })
	})
}

// processGone: no process pid, or a zombie.
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func ids(rules []bpf.FlowRule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.ID)
	}
	return out
}

// TestFrameBound: a message announced over maxFrame is refused before
// anything is read into memory, and so is one sent.
func TestFrameBound(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	conns := make([]*conn, 2)
	for i, fd := range pair {
		f := os.NewFile(uintptr(fd), "pair")
		fc, err := net.FileConn(f)
		f.Close()
		require.NoError(t, err)
		conns[i] = &conn{c: fc.(*net.UnixConn)}
		defer conns[i].close()
	}
	_, err = conns[0].c.Write([]byte{0x02, 0, 0, 1}) // maxFrame + 1
	require.NoError(t, err)
	_, err = conns[1].read(time.Second)
	require.ErrorIs(t, err, errFrameSize)
	err = conns[0].write(&frame{T: msgLog, Msg: strings.Repeat("x", maxFrame)}, time.Second)
	require.ErrorIs(t, err, errFrameSize)
	require.NoError(t, conns[0].write(&frame{T: msgLog, Msg: "ok"}, time.Second))
}
