//go:build linux

package xdp_drop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/cilium/ebpf"
	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// recordLog keeps every line logged, with Telegraf's level prefix.
type recordLog struct {
	testutil.Logger
	mu    sync.Mutex
	lines []string
}

func (l *recordLog) add(level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, args...))
}

func (l *recordLog) Errorf(format string, args ...any) { l.add("E!", format, args...) }
func (l *recordLog) Warnf(format string, args ...any)  { l.add("W!", format, args...) }
func (l *recordLog) Infof(format string, args ...any)  { l.add("I!", format, args...) }

func (l *recordLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// pinForeignMap pins a small map at path, as another tool would.
func pinForeignMap(t *testing.T, path string) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Pin(path))
}

// TestForeignPinsKept: files another tool pinned in an interface's pin
// directory survive both the start (stale counters are unpinned by their
// exact names only) and the interface's removal, which unpins only what the
// plugin pinned and says what it left.
func TestForeignPinsKept(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	ifDir := filepath.Join(dir, "xdpt2")
	require.NoError(t, os.MkdirAll(ifDir, 0o700))
	foreign := []string{"important", "counters_mine"}
	for _, name := range foreign {
		pinForeignMap(t, filepath.Join(ifDir, name))
	}

	log := &recordLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{"xdpt2"}, Drop: []any{"all"}, PinPath: dir, Log: log})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	ours, err := filepath.Glob(filepath.Join(ifDir, "counters_*"))
	require.NoError(t, err)
	require.Len(t, ours, 2, "the plugin's counters next to the foreign counters_mine")

	require.NoError(t, ns.DelLink("xdpt2"))
	acc = &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	entries, err := os.ReadDir(ifDir)
	require.NoError(t, err, "the directory stays while it holds foreign pins")
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	require.ElementsMatch(t, foreign, left, "only the plugin's own pins are removed")
	require.Contains(t, strings.Join(log.all(), "\n"),
		fmt.Sprintf(`I! interface "xdpt2": unpinned its counters; left %q in place, holding counters_mine, important that xdp_drop did not pin`, ifDir))
}

// TestPinPathNotADirectory: pin_path naming a pinned map, or a pinned map
// where the interface's directory would be, is reported as such; nothing
// is attached and the map stays.
func TestPinPathNotADirectory(t *testing.T) {
	ns := testns.New(t)
	dir := pinDir(t)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	m := filepath.Join(dir, "somemap")
	pinForeignMap(t, m)
	pinForeignMap(t, filepath.Join(dir, testns.Dev))

	for _, c := range []struct{ pinPath, want string }{
		{m, fmt.Sprintf(`interface %q: pin_path = %q: %s is a pinned BPF map, not a directory; set pin_path to a directory (created if missing), e.g. "/sys/fs/bpf/xdp_drop"`, testns.Dev, m, m)},
		{dir, fmt.Sprintf(`interface %q: pin_path: %s is a pinned BPF map, not a directory; it is not ours, so it is left alone: move it, or choose another pin_path`, testns.Dev, filepath.Join(dir, testns.Dev))},
	} {
		for _, keep := range []bool{false, true} {
			p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, PinPath: c.pinPath, KeepAttached: keep, Log: testutil.Logger{}})
			acc := startPlugin(t, ns, p)
			require.Len(t, acc.Errors, 1)
			require.Equal(t, c.want, acc.Errors[0].Error())
			id, err := ns.XDPProgramID(testns.Dev)
			require.NoError(t, err)
			require.Zero(t, id)
			inNS(t, ns, p, func() error { p.Stop(); return nil })
		}
	}
	for _, path := range []string{m, filepath.Join(dir, testns.Dev)} {
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.False(t, st.IsDir(), "the map is left alone")
	}
}

// TestOddInterfaceNames: an interface named rt[0] is attached when named
// with escaped glob characters, and the pattern "rt[0]" (which matches rt0)
// warns that it does not name it; a name with byte 0xFF reaches the
// interface tag as valid UTF-8, escaped.
func TestOddInterfaceNames(t *testing.T) {
	ns := testns.New(t)
	for _, pair := range [][2]string{{"xr[0]", "xs0"}, {"xr0", "xs1"}, {"xr\xff", "xs2"}} {
		_, _, err := ns.AddVeth(pair[0], pair[1])
		require.NoError(t, err)
	}
	all := []string{"xr[0]", "xr0", "xr\xff", "xs0", "xs1", "xs2"}
	inNS(t, ns, withDefaults(&XDPDrop{Interfaces: all}), func() error { return nil })

	p := withDefaults(&XDPDrop{Interfaces: []string{`xr\[0\]`}, Drop: []any{"all"}, Log: testutil.Logger{}})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	require.Equal(t, []string{"xr[0]"}, attachedSet(t, ns, all...), "the escaped name attaches rt[0] only")
	inNS(t, ns, p, func() error { p.Stop(); return nil })

	log := &recordLog{}
	p = withDefaults(&XDPDrop{Interfaces: []string{"xr[0]"}, Drop: []any{"all"}, Log: log})
	acc = startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	require.Equal(t, []string{"xr0"}, attachedSet(t, ns, all...), "unescaped, it is a glob")
	require.Contains(t, log.all(), `W! interfaces: "xr[0]" is a glob pattern, which does not match the interface named "xr[0]"; to name that interface, escape the glob characters: 'xr\[0\]'`)
	inNS(t, ns, p, func() error { p.Stop(); return nil })

	p = withDefaults(&XDPDrop{Interfaces: []string{"xr?"}, Drop: []any{"all"}, Log: testutil.Logger{}})
	acc = startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	require.Equal(t, []string{"xr0", "xr\xff"}, attachedSet(t, ns, all...))
	tags := map[string]bool{}
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() == "xdp_drop_link" {
			iface, _ := m.GetTag("interface")
			require.True(t, utf8.ValidString(iface), "%q", iface)
			tags[iface] = true
		}
	}
	require.Equal(t, map[string]bool{"xr0": true, `xr\xff`: true}, tags)
}

// TestReplaceStaleOwnProgram: replace = true replaces an xdp_drop program
// that no running process owns: a link only a pin keeps (keep_attached of
// a stopped run under another pin_path) or a netlink attachment. One that
// this process holds is refused, naming it.
func TestReplaceStaleOwnProgram(t *testing.T) {
	ns := testns.New(t)
	kept := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, PinPath: pinDir(t), KeepAttached: true, Log: testutil.Logger{}})
	startPlugin(t, ns, kept)
	staleID := kept.links.ifaces[0].prog.ID()
	inNS(t, ns, kept, func() error { kept.Stop(); return nil })

	log := &recordLog{}
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Replace: true, Log: log})
	acc := startPlugin(t, ns, p)
	require.Empty(t, acc.Errors)
	require.Contains(t, log.all(), fmt.Sprintf(`W! interface %q: replaced XDP program id %d (replace = true)`, testns.Dev, staleID))
	inNS(t, ns, p, func() error { p.Stop(); return nil })

	stale, err := bpf.Load(bpf.Policy{DropAll: true})
	require.NoError(t, err)
	defer stale.Close()
	require.NoError(t, ns.Do(func() error {
		if err := ns.CheckAttachable(testns.Dev); err != nil {
			return err
		}
		l, err := netlink.LinkByName(testns.Dev)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFd(l, stale.XDP().FD())
	}))
	p = withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Replace: true, Log: testutil.Logger{}})
	acc = startPlugin(t, ns, p)
	require.Empty(t, acc.Errors, "a netlink attachment has no running owner")
	inNS(t, ns, p, func() error { p.Stop(); return nil })

	require.NoError(t, ns.Do(func() error { return stale.Attach(ns.DevIdx, bpf.ModeNative) }))
	p = withDefaults(&XDPDrop{Interfaces: []string{testns.Dev}, Drop: []any{"all"}, Replace: true, Log: testutil.Logger{}})
	acc = startPlugin(t, ns, p)
	require.Len(t, acc.Errors, 1)
	require.Contains(t, acc.Errors[0].Error(), fmt.Sprintf("XDP program id %d (xdp_drop) belongs to a running instance: process %d (", stale.ID(), os.Getpid()))
	id, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, uint32(stale.ID()), id, "left alone")
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(entries)
}

// TestFDsPerInterface: each attached interface holds bpf.FDsPerInterface
// descriptors, the number the out-of-descriptors error and docs/CONFIGURATION.md give,
// and gives them back when released.
func TestFDsPerInterface(t *testing.T) {
	ns := testns.New(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev, "xdpt2"}, Drop: []any{"all"}, PinPath: pinDir(t), KeepAttached: true, Log: testutil.Logger{}})
	require.NoError(t, p.Init())
	before := openFDs(t)
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	require.Empty(t, acc.Errors)
	require.Equal(t, 2*bpf.FDsPerInterface, openFDs(t)-before)
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	require.Equal(t, before, openFDs(t), "released")
}

// TestFDsPerInterfaceWithRules: each interface keeps its rule counters
// open, the instance keeps the rule maps open once for all, and the
// out-of-descriptors advice counts what each interface adds.
func TestFDsPerInterfaceWithRules(t *testing.T) {
	ns := testns.New(t)
	_, _, err := ns.AddVeth("xdpt2", "xdpt3")
	require.NoError(t, err)
	p := withDefaults(&XDPDrop{Interfaces: []string{testns.Dev, "xdpt2"}, Log: testutil.Logger{}, Rules: []Rule{
		{Name: "dns", Action: "drop", Protocol: []any{"udp"}, SrcPrefix: []string{"192.0.2.0/24"}, DstPort: []any{int64(53)}},
	}})
	require.NoError(t, p.Init())
	before := openFDs(t)
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	require.Empty(t, acc.Errors)
	require.Equal(t, 2*p.links.policy.FDs()+p.links.policy.SharedFDs(), openFDs(t)-before)
	require.Equal(t, bpf.FDsPerInterface+1, p.links.policy.FDs())
	require.Equal(t, 5, p.links.policy.SharedFDs(), "prefix buckets, exact prefixes, two tries, ports")
	require.Contains(t, fdAdvice(p.links.policy.FDs()), "each attached interface holds 5")
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	require.Equal(t, before, openFDs(t), "released")
}
