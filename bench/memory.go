//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

type memoryConfig struct {
	trials  int
	gathers int // gathers asked for while attached
}

type memoryResult struct {
	ifaces     int
	peakRSS    uint64 // bytes, the highest VmHWM over the trials
	rssMedian  uint64 // bytes, median VmHWM
	attach     time.Duration
	detach     time.Duration
	exit       time.Duration
	trials     int
	gathers    int
	binarySize int64
}

// buildBinary builds the plugin binary as make build does, into dir.
func buildBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "telegraf-xdp-drop")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/xdp-drop/xdp_drop/cmd/telegraf-xdp-drop")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the binary: %w", err)
	}
	return bin, nil
}

// memory runs the binary in the namespace on every name in names, as execd
// would (gathering on a line on stdin), and measures its peak RSS, the time
// from start until every interface has an XDP program, and the time from
// closing its stdin until none has.
func memory(e *env, cfg memoryConfig, bin string, names []string) (memoryResult, error) {
	r := memoryResult{ifaces: len(names), trials: cfg.trials, gathers: cfg.gathers}
	if st, err := os.Stat(bin); err == nil {
		r.binarySize = st.Size()
	}
	conf := filepath.Join(filepath.Dir(bin), fmt.Sprintf("xdp_drop_%d.conf", len(names)))
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	// Released at once on stop: the detach measured is the plugin's own,
	// not a handover waiting for a successor that never comes.
	text := fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%s]\n  drop = [\"all\"]\n  handover_timeout = \"0s\"\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return r, err
	}
	// The binary attaches to whatever its config names in the namespace it
	// runs in: only this run's veths are allowed there.
	if err := e.ns.Do(func() error {
		for _, n := range names {
			if err := e.ns.CheckAttachable(n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return r, err
	}

	var rss []float64
	var attach, detach, exit []time.Duration
	for t := 0; t < cfg.trials; t++ {
		tr, err := e.memoryTrial(bin, conf, names, cfg.gathers)
		if err != nil {
			return r, fmt.Errorf("trial %d: %w", t, err)
		}
		rss = append(rss, float64(tr.hwm))
		r.peakRSS = max(r.peakRSS, tr.hwm)
		attach, detach, exit = append(attach, tr.attach), append(detach, tr.detach), append(exit, tr.exit)
	}
	r.rssMedian = uint64(median(rss))
	r.attach, r.detach, r.exit = medianDuration(attach), medianDuration(detach), medianDuration(exit)
	return r, nil
}

type memoryTrial struct {
	hwm                  uint64
	attach, detach, exit time.Duration
}

func (e *env) memoryTrial(bin, conf string, names []string, gathers int) (memoryTrial, error) {
	var tr memoryTrial
	cmd := e.ns.Exec(bin, "-config", conf, "-poll_interval_disabled")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return tr, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return tr, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return tr, err
	}
	// ip netns exec execs the binary in place: the pid is the binary's.
	pid := cmd.Process.Pid
	lines := make(chan string, 4096)
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	var exited bool
	defer func() {
		if !exited {
			cmd.Process.Kill()
			<-done
		}
	}()
	fail := func(err error) (memoryTrial, error) {
		return tr, fmt.Errorf("%w; stderr: %s", err, stderr.String())
	}

	var hwm uint64
	sample := func() {
		if v, err := vmHWM(pid); err == nil {
			hwm = max(hwm, v)
		}
	}
	if err := e.waitXDP(names, true, 20*time.Second, sample); err != nil {
		return fail(err)
	}
	tr.attach = time.Since(start)

	for g := 0; g < gathers; g++ {
		if _, err := io.WriteString(stdin, "\n"); err != nil {
			return fail(err)
		}
		if err := readGather(lines, names[len(names)-1], len(names)); err != nil {
			return fail(err)
		}
		sample()
	}
	sample()

	closed := time.Now()
	stdin.Close()
	if err := e.waitXDP(names, false, 10*time.Second, sample); err != nil {
		return fail(err)
	}
	tr.detach = time.Since(closed)
	select {
	case err := <-done:
		exited = true
		tr.exit = time.Since(closed)
		if err != nil {
			return fail(fmt.Errorf("binary exited: %w", err))
		}
	case <-time.After(10 * time.Second):
		return fail(errors.New("binary still running 10s after stdin closed"))
	}
	// Not the kernel's maxrss of the exited child: Go starts it with
	// vfork, so until the exec it shares this process's memory, and exec
	// folds that peak (this process's, over 100 MB after the rules
	// section) into the child's. VmHWM is the binary's own memory's.
	tr.hwm = hwm
	return tr, nil
}

// waitXDP polls until every interface in names has an XDP program
// (attached) or none has, calling sample at every poll.
func (e *env) waitXDP(names []string, attached bool, d time.Duration, sample func()) error {
	deadline := time.Now().Add(d)
	for {
		sample()
		links, err := e.ns.Netlink().LinkList()
		if err != nil {
			return err
		}
		have := make(map[string]bool, len(links))
		for _, l := range links {
			x := l.Attrs().Xdp
			have[l.Attrs().Name] = x != nil && x.Attached && x.ProgId != 0
		}
		n := 0
		for _, name := range names {
			if have[name] == attached {
				n++
			}
		}
		if n == len(names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d of %d interfaces are in the state wanted (attached %v)", d, n, len(names), attached)
		}
		time.Sleep(time.Millisecond)
	}
}

// readGather reads line protocol until the xdp_drop_link point of the last
// interface, and checks that every interface reported itself attached.
func readGather(lines <-chan string, last string, ifaces int) error {
	timeout := time.After(10 * time.Second)
	attached := 0
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return errors.New("stdout closed")
			}
			if !strings.HasPrefix(line, xdp_drop.MeasurementLink+",") {
				continue
			}
			if strings.Contains(line, xdp_drop.FieldAttached+"=true") {
				attached++
			}
			iface := xdp_drop.TagInterface + "=" + last
			if strings.Contains(line, iface+",") || strings.Contains(line, iface+" ") {
				if attached != ifaces {
					return fmt.Errorf("%d of %d interfaces reported attached", attached, ifaces)
				}
				return nil
			}
		case <-timeout:
			return errors.New("no complete gather within 10s")
		}
	}
}

// vmHWM reads the peak resident set size of a process, in bytes.
func vmHWM(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmHWM")
}
