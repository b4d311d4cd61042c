//go:build linux

package xdp_drop

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
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

	return nsthread.Do(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter namespace %q: %w", x.Namespace, err)
		}
		return nil
	}, f)
}
