//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// xdpLoader returns Debian's xdp-loader (xdp-tools) and an XDP object it
// can load, or skips; CI installs xdp-tools and requires the test to run.
func xdpLoader(t *testing.T) (loader, object string) {
	t.Helper()
	loader, err := exec.LookPath("xdp-loader")
	objects, _ := filepath.Glob("/usr/lib/*/bpf/xdpfilt_alw_all.o")
	if err == nil && len(objects) > 0 {
		return loader, objects[0]
	}
	if os.Getenv(testns.RequireEnv) == "1" {
		t.Fatalf("xdp-loader and xdp-tools' xdpfilt_alw_all.o are needed (apt-get install xdp-tools), and %s=1 forbids skipping", testns.RequireEnv)
	}
	t.Skip("needs xdp-tools: apt-get install xdp-tools")
	return "", ""
}

// TestXDPLoaderBesideInstance: what xdp-tools' xdp-loader (libxdp) and
// xdp_drop do to each other on one interface. libxdp attaches through
// netlink, xdp_drop through a bpf_link, which netlink cannot replace or
// remove: xdp-loader beside a running instance fails and leaves it
// attached; the plugin beside xdp-loader's program leaves it alone, and
// replaces it only with replace = true.
func TestXDPLoaderBesideInstance(t *testing.T) {
	loader, object := xdpLoader(t)
	conf := func(replace bool) string {
		return fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [%q]\n  drop = [\"udp\"]\n  replace = %v\n  handover_timeout = \"0s\"\n", testns.Dev, replace)
	}

	t.Run("xdp_drop first", func(t *testing.T) {
		ns := testns.New(t)
		instance := start(t, ns, conf(false))
		id := waitAttached(t, ns, testns.Dev)
		require.True(t, hasXDPLink(t, id), "xdp_drop attaches through a bpf_link")

		out, err := ns.Exec(loader, "load", testns.Dev, object).CombinedOutput()
		t.Logf("xdp-loader load:\n%s", out)
		require.Error(t, err, "xdp-loader load beside a running instance")
		require.Contains(t, string(out), "libxdp: Existing program is not using a dispatcher, can't replace; unload first")
		require.Contains(t, string(out), fmt.Sprintf("Couldn't attach XDP program on iface '%s': Device or resource busy(-16)", testns.Dev))

		out, err = ns.Exec(loader, "unload", testns.Dev, "--all").CombinedOutput()
		t.Logf("xdp-loader unload --all:\n%s", out)
		require.Error(t, err, "xdp-loader unload beside a running instance")
		require.Contains(t, string(out), "Can't replace active BPF XDP link")
		require.Contains(t, string(out), "Unable to detach XDP program: Device or resource busy")

		cur, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, id, cur, "the instance's program stays attached")
		attached, gotID, _ := gatherState(t, instance, "udp", "drop")
		require.True(t, attached)
		require.Equal(t, int64(id), gotID)
		require.NotContains(t, instance.stderr.String(), "E! ")
	})

	t.Run("xdp-loader first", func(t *testing.T) {
		ns := testns.New(t)
		require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
		out, err := ns.Exec(loader, "load", testns.Dev, object).CombinedOutput()
		t.Logf("xdp-loader load:\n%s", out)
		require.NoError(t, err)
		// Under ip netns exec, /sys is fresh and has no BPF filesystem:
		// libxdp attaches the program alone, without its dispatcher.
		require.Contains(t, string(out), "libxdp: Can't use dispatcher without a working bpffs")
		id := waitAttached(t, ns, testns.Dev)
		require.False(t, hasXDPLink(t, id), "xdp-loader attached program id %d through a bpf_link, not netlink", id)

		p := start(t, ns, conf(false))
		ms := p.gather(t, testns.Dev)
		link := ms[len(ms)-1]
		attached, _ := link.GetField("attached")
		require.Equal(t, false, attached)
		want := fmt.Sprintf("interface %q: interface already has XDP program id %d (xdpfilt_alw_all); it is not ours, so it is left alone: set replace = true to replace it, or detach it first", testns.Dev, id)
		msg, _ := link.GetField("error")
		require.Equal(t, want, msg)
		waitLog(t, p, "E! Error in plugin: "+want) // stderr may trail the points
		cur, err := ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, id, cur, "xdp-loader's program is left alone")
		require.NoError(t, p.stdin.Close())
		require.NoError(t, p.wait(t))

		// With replace = true the program, attached through netlink, is
		// removed, and xdp_drop's attached instead.
		p = start(t, ns, conf(true))
		waitLog(t, p, fmt.Sprintf("W! interface %q: replaced XDP program id %d (replace = true)", testns.Dev, id))
		replaced, own, _ := gatherState(t, p, "udp", "drop")
		require.True(t, replaced, "stderr: %s", p.stderr)
		cur, err = ns.XDPProgramID(testns.Dev)
		require.NoError(t, err)
		require.Equal(t, own, int64(cur), "xdp_drop's program is attached instead")
		require.NoError(t, p.stdin.Close())
		require.NoError(t, p.wait(t))
		requireDetached(t, ns, "the replacing instance stopped")
	})
}

// hasXDPLink reports whether an XDP bpf_link attaches program id.
func hasXDPLink(t *testing.T, id uint32) bool {
	t.Helper()
	it := new(link.Iterator)
	defer it.Close()
	found := false
	for it.Next() {
		info, err := it.Link.Info()
		require.NoError(t, err)
		if info.Type == link.XDPType && uint32(info.Program) == id {
			found = true
		}
	}
	require.NoError(t, it.Err())
	return found
}
