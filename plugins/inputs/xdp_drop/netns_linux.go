//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// inNamespace runs f on an OS thread inside the configured network
// namespace, so that interface lookups and XDP attachment (which the kernel
// resolves in the caller's namespace) act there. Without a namespace it runs
// f directly.
func (x *XDPDrop) inNamespace(f func() error) error {
	if x.Namespace == "" {
		return f()
	}
	path := x.Namespace
	if !strings.Contains(path, "/") {
		path = "/var/run/netns/" + path
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("namespace = %q: %w; create it (ip netns add) or name an existing one", x.Namespace, err)
	}
	defer target.Close()

	done := make(chan error, 1)
	go func() {
		// A thread that cannot be put back stays locked and dies with this goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			done <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			done <- fmt.Errorf("enter namespace %q: %w", x.Namespace, err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("leave namespace %q: %w", x.Namespace, err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}
