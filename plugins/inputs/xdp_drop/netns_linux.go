//go:build linux

package xdp_drop

import (
	"fmt"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/nsthread"
	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// do runs f on an OS thread inside the network namespace, so that
// interface lookups and XDP attachment (which the kernel resolves in the
// caller's namespace) act there. Without a namespace, or when the process
// is in it already, it runs f directly.
func (n namespace) do(f func() error) error {
	if n.name == "" {
		return f()
	}
	path := n.path()
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("namespace = %s: %w; create it (ip netns add) or name an existing one", quote.Value(n.name), err)
	}
	defer target.Close()
	if ownNamespace(path) {
		return f()
	}

	return nsthread.Do(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter namespace %s: %w", quote.Value(n.name), err)
		}
		return nil
	}, f)
}

// checkEntry refuses a namespace this process could never enter.
// Entering another network namespace (setns) needs CAP_SYS_ADMIN, which the
// binary's file capabilities rightly leave out; and there is no way around
// it: an XDP link attaches to an interface of the caller's own namespace,
// and a netlink request naming another namespace (IFLA_TARGET_NETNSID)
// moves the caller's interface there instead of addressing one of its own.
func (n namespace) checkEntry() error {
	if n.name == "" || trust.HasCapability(unix.CAP_SYS_ADMIN) || ownNamespace(n.path()) {
		return nil
	}
	return fmt.Errorf("namespace = %s: entering another network namespace needs CAP_SYS_ADMIN, which this process lacks "+
		"(the package grants the binary only CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON), and XDP attaches only to the interfaces of the process's own namespace; "+
		"remove namespace and run a Telegraf instance inside that namespace instead: in its systemd unit (or a drop-in), NetworkNamespacePath=%s",
		quote.Value(n.name), n.path())
}

// ownNamespace reports whether path is the network namespace the process
// is in.
func ownNamespace(path string) bool {
	var target, own unix.Stat_t
	if unix.Stat(path, &target) != nil || unix.Stat("/proc/self/ns/net", &own) != nil {
		return false
	}
	return target.Dev == own.Dev && target.Ino == own.Ino
}
