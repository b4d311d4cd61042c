//go:build linux

package nsthread

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// In runs f inside network namespace ns: a name of ip netns's (in
// /var/run/netns) or a path; "" runs f where it is. When the calling
// thread is in ns already (the usual case: the whole process in it), f
// runs on it, locked to it while f runs; else on a thread of Do's. Only
// the calling thread is asked: another goroutine may have moved the
// process's other threads, the main one included.
func In(ns string, f func() error) error {
	if ns == "" {
		return f()
	}
	path := ns
	if !strings.Contains(ns, "/") {
		path = "/var/run/netns/" + ns
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", quote.Value(ns), err)
	}
	defer target.Close()
	var there, own unix.Stat_t
	runtime.LockOSThread()
	if unix.Fstat(int(target), &there) == nil && unix.Stat("/proc/thread-self/ns/net", &own) == nil && there.Dev == own.Dev && there.Ino == own.Ino {
		defer runtime.UnlockOSThread()
		return f()
	}
	runtime.UnlockOSThread()
	return Do(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter network namespace %s: %w", quote.Value(ns), err)
		}
		return nil
	}, f)
}
