package xdp_drop

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// namespace is the network namespace the interfaces are in (the namespace
// option): "" for the process's own. Its work runs on a thread of its own
// inside it (do, netns_linux.go).
type namespace struct {
	name string // a name in /var/run/netns or a path
}

// path is the file of the network namespace: a name is one of ip netns's.
func (n namespace) path() string {
	if strings.Contains(n.name, "/") {
		return n.name
	}
	return "/var/run/netns/" + n.name
}

// check refuses a namespace option that names no namespace, or one this
// process could never enter (checkEntry).
func (n namespace) check() error {
	switch {
	case n.name == "":
		return nil
	case len(n.name) > maxPath:
		return fmt.Errorf("namespace = %s is %d bytes long; a path has at most %d", quote.Value(n.name), len(n.name), maxPath)
	case !strings.Contains(n.name, "/") && len(n.name) > maxFileName:
		return fmt.Errorf("namespace = %s is %d bytes long; a name in /var/run/netns has at most %d", quote.Value(n.name), len(n.name), maxFileName)
	case strings.ContainsAny(n.name, " \t\n"):
		return fmt.Errorf("namespace = %s: not a namespace name or path; use a name from /var/run/netns or a path such as /proc/1234/ns/net", quote.Value(n.name))
	case strings.Contains(n.name, "/") && !filepath.IsAbs(n.name):
		return fmt.Errorf("namespace = %s: a path must be absolute, such as /proc/1234/ns/net; a name has no '/'", quote.Value(n.name))
	case n.name == "." || n.name == "..":
		return fmt.Errorf("namespace = %s: not a namespace name", quote.Value(n.name))
	}
	return n.checkEntry()
}
