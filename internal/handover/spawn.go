//go:build linux

package handover

import (
	"errors"
	"fmt"
	"log/syslog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// holderEnv marks the re-executed binary as a holder; the control socket
// is its descriptor 3.
const holderEnv = "XDP_DROP_HANDOVER_HOLDER"

// Spawn starts a holder process (this binary, re-executed) and hands it the
// offers over a socket pair; it returns the holder's pid and, per offer, why
// it could not be held (nil when it is held). The caller keeps its own
// descriptors and closes them as usual: the holder has copies.
//
// The holder gets no stdout or stderr: inputs.execd reads the plugin's
// pipes to their end before it starts a successor, so a holder keeping them
// open would hold up the reload it is there for. It logs to syslog.
func Spawn(dir string, timeout time.Duration, offers []Offer) (int, []error, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("socket pair: %w", err)
	}
	ours := os.NewFile(uintptr(pair[0]), "handover-control")
	theirs := os.NewFile(uintptr(pair[1]), "handover-control")
	defer ours.Close()
	cmd := exec.Command("/proc/self/exe")
	// Named apart in ps; the binary's flags do not apply to it.
	cmd.Args = []string{os.Args[0] + " [handover]"}
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return 0, nil, fmt.Errorf("start the handover process: %w", err)
	}
	// Reaped here while this process lives; adopted by init after.
	go cmd.Wait()
	fc, err := net.FileConn(ours)
	if err != nil {
		cmd.Process.Kill()
		return 0, nil, fmt.Errorf("control socket: %w", err)
	}
	c := fc.(*net.UnixConn)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	errs, err := handOff(c, dir, timeout, offers)
	if err != nil {
		cmd.Process.Kill()
		return 0, nil, fmt.Errorf("hand over to process %d: %w", cmd.Process.Pid, err)
	}
	return cmd.Process.Pid, errs, nil
}

func handOff(c *net.UnixConn, dir string, timeout time.Duration, offers []Offer) ([]error, error) {
	if err := send(c, message{TimeoutNS: int64(timeout), Dir: dir}, nil); err != nil {
		return nil, err
	}
	for i := range offers {
		if err := send(c, message{Offer: &offers[i].Header}, offers[i].FDs); err != nil {
			return nil, err
		}
	}
	if err := send(c, message{End: true}, nil); err != nil {
		return nil, err
	}
	reply, fds, err := receive(c, 0)
	closeAll(fds)
	if err != nil {
		return nil, fmt.Errorf("read the handover process's reply: %w", err)
	}
	if len(reply.Errors) != len(offers) {
		return nil, fmt.Errorf("the handover process answered for %d offers, not %d", len(reply.Errors), len(offers))
	}
	errs := make([]error, len(offers))
	for i, e := range reply.Errors {
		if e != "" {
			errs[i] = errors.New(e)
		}
	}
	return errs, nil
}

// RunHolderIfRequested turns this process into a holder when it was started
// as one by Spawn, and never returns then. Call it first in main (and in
// TestMain of tests that spawn holders).
func RunHolderIfRequested() {
	if os.Getenv(holderEnv) == "" {
		return
	}
	os.Unsetenv(holderEnv)
	os.Exit(runHolder())
}

func runHolder() int {
	// stderr goes nowhere; a write to a closed pipe must not kill the holder.
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	log := newSyslog()
	f := os.NewFile(3, "handover-control")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		log.Warnf("handover process: control socket: %v", err)
		return 1
	}
	c := fc.(*net.UnixConn)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	dir, timeout, offers, err := readOffers(c)
	if err != nil {
		c.Close()
		log.Warnf("handover process: %v; nothing held", err)
		for _, o := range offers {
			closeAll(o.FDs)
		}
		return 1
	}
	h, errs := NewHolder(dir, timeout, offers, log)
	reply := message{PID: os.Getpid(), Errors: make([]string, len(errs))}
	for i, e := range errs {
		if e != nil {
			reply.Errors[i] = e.Error()
		}
	}
	send(c, reply, nil)
	c.Close()
	h.Wait(stop)
	return 0
}

func readOffers(c *net.UnixConn) (string, time.Duration, []Offer, error) {
	first, fds, err := receive(c, 0)
	closeAll(fds)
	if err != nil {
		return "", 0, nil, err
	}
	var offers []Offer
	for {
		m, fds, err := receive(c, MaxSharedFDs)
		if err != nil {
			return "", 0, offers, err
		}
		if m.End {
			closeAll(fds)
			return first.Dir, time.Duration(first.TimeoutNS), offers, nil
		}
		if m.Offer == nil || !validFDs(m.Offer.Key, len(fds)) {
			closeAll(fds)
			return "", 0, offers, fmt.Errorf("malformed offer (%d descriptors)", len(fds))
		}
		offers = append(offers, Offer{Header: *m.Offer, FDs: fds})
	}
}

// syslogger logs through syslog (the journal under systemd), or nowhere.
type syslogger struct{ w *syslog.Writer }

func newSyslog() *syslogger {
	w, _ := syslog.New(syslog.LOG_DAEMON|syslog.LOG_INFO, "telegraf-xdp-drop")
	return &syslogger{w: w}
}

func (s *syslogger) Infof(format string, args ...any) {
	if s.w != nil {
		s.w.Info(fmt.Sprintf(format, args...))
	}
}

func (s *syslogger) Warnf(format string, args ...any) {
	if s.w != nil {
		s.w.Warning(fmt.Sprintf(format, args...))
	}
}
