//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/frames"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
	"github.com/xdp-drop/xdp_drop/internal/testing/txgen"
)

// statusConfig drops UDP, passes DNS by a rule, drops a blocklist of a
// literal prefix and a file, and limits NTP.
func statusConfig(list string) string {
	return fmt.Sprintf(`[[inputs.xdp_drop]]
  interfaces = [%q]
  drop = ["udp"]
  handover_timeout = "0s"
  [[inputs.xdp_drop.rule]]
    name = "dns"
    action = "pass"
    protocol = ["udp"]
    dst_port = [53]
  [[inputs.xdp_drop.rule]]
    name = "blocklist"
    action = "drop"
    src_prefix = ["192.0.2.0/24"]
    src_prefix_file = [%q]
  [[inputs.xdp_drop.rule]]
    name = "ntp-limit"
    action = "limit"
    protocol = ["udp"]
    dst_port = [123, "1000-1010"]
    rate = 1000
    burst = 2000
`, testns.Dev, list)
}

// writeList writes a prefix file of two IPv4 prefixes and one IPv6 one.
func writeList(t *testing.T) string {
	t.Helper()
	list := filepath.Join(t.TempDir(), "drop.txt")
	require.NoError(t, os.WriteFile(list, []byte("; blocklist\n198.18.0.0/15\n203.0.113.128/25 ; a note\n2001:db8::/32\n"), 0o644))
	return list
}

// runStatusCmd runs the binary with -status and the flags, in ns; it
// returns stdout, stderr and the exit code.
func runStatusCmd(t *testing.T, ns *testns.NS, conf string, flags ...string) (string, string, int) {
	t.Helper()
	return runSplit(t, ns.Exec(binary, append([]string{"-config", conf, "-status"}, flags...)...))
}

// TestStatusBesideInstance: beside a running instance, -status -json
// describes what it has in force, exact for the frames sent: its program,
// mode, link and holder; each rule as compiled with its hits; the prefix
// sources by family. The human form says the same. Neither attaches,
// detaches or resets anything: the program id stays and counters go on.
func TestStatusBesideInstance(t *testing.T) {
	ns := testns.New(t)
	list := writeList(t)
	conf := statusConfig(list)
	instance := start(t, ns, conf)
	id := waitAttached(t, ns, testns.Dev)

	udp := func(src string, dport uint16) []byte {
		l4 := frames.Ports(frames.UDP(18), 40000, dport)
		return frames.Ether(frames.EtherIPv4, frames.Addressed(frames.IPv4(frames.ProtoUDP, 0, l4),
			netip.MustParseAddr(src), netip.MustParseAddr("198.51.100.9")))
	}
	gen, err := txgen.New()
	require.NoError(t, err)
	defer gen.Close()
	send := func(frame []byte, n int) {
		require.NoError(t, ns.Do(func() error { return gen.Send(ns.PeerIdx, frame, n) }))
	}
	dns := udp("203.0.113.5", 53)
	send(dns, 11)                  // passed by dns
	send(udp("203.0.113.5", 9), 7) // dropped by the drop list
	send(udp("198.18.0.1", 9), 3)  // dropped by the blocklist's file
	frameBytes := uint64(len(dns))

	confPath := writeConfig(t, conf)
	out, errOut, code := runStatusCmd(t, ns, confPath, "-json")
	t.Logf("-status -json:\n%s", out)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	require.NotContains(t, errOut, "E! ")

	var got statusReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, confPath, got.Config)
	require.Equal(t, []string{"udp"}, got.Drop)
	require.False(t, got.DryRun)
	require.Equal(t, "config and files, as read now", got.PrefixesFrom)
	require.Len(t, got.Interfaces, 1)
	ifc := got.Interfaces[0]
	require.Equal(t, testns.Dev, ifc.Interface)
	require.True(t, ifc.Attached)
	require.Equal(t, int64(id), ifc.ProgramID)
	require.Equal(t, "native", ifc.Mode)
	require.Equal(t, "link", ifc.Route)
	require.NotZero(t, ifc.LinkID)
	require.Equal(t, []holderStatus{{PID: instance.cmd.Process.Pid, Comm: "telegraf-xdp-dr"}}, ifc.Holders)
	require.Empty(t, ifc.Error)

	hit := func(action string, packets uint64) hitStatus {
		return hitStatus{Interface: testns.Dev, Action: action, Packets: packets, Bytes: packets * frameBytes}
	}
	require.Equal(t, []ruleStatus{
		{
			Name: "dns", Action: "pass", Protocols: []string{"udp"}, SrcPorts: []string{}, DstPorts: []string{"53"},
			Sources: []sourceStatus{}, Hits: []hitStatus{hit("pass", 11)},
		},
		{
			Name: "blocklist", Action: "drop", Protocols: []string{}, SrcPorts: []string{}, DstPorts: []string{},
			SrcPrefixes: familyCount{IPv4: 3, IPv6: 1},
			Sources: []sourceStatus{
				{Option: "src_prefix", familyCount: familyCount{IPv4: 1}, State: "config"},
				{Option: "src_prefix_file", File: list, familyCount: familyCount{IPv4: 2, IPv6: 1}, State: "loaded"},
			},
			Hits: []hitStatus{hit("drop", 3)},
		},
		{
			Name: "ntp-limit", Action: "limit", Protocols: []string{"udp"}, SrcPorts: []string{}, DstPorts: []string{"123", "1000-1010"},
			Sources: []sourceStatus{},
			Limit:   &limitStatus{Rate: 1000, Burst: 2000, Per: "source", PrefixIPv4: 32, PrefixIPv6: 64},
			Hits:    []hitStatus{hit("pass", 0), hit("drop", 0)},
		},
	}, got.Rules)

	human, errOut, code := runStatusCmd(t, ns, confPath)
	t.Logf("-status:\n%s", human)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	for _, re := range []string{
		`(?m)^xdp_drop status of ` + regexp.QuoteMeta(confPath) + `$`,
		`(?m)^drop udp, dry_run false$`,
		fmt.Sprintf(`(?m)^xdpt0\s+%d\s+native\s+link \d+, held by pid %d \(telegraf-xdp-dr\)$`, id, instance.cmd.Process.Pid),
		fmt.Sprintf(`(?m)^dns\s+pass\s+xdpt0\s+pass\s+11\s+%s\s+protocol udp; dst_port 53$`, number(11*frameBytes, 26)),
		`(?m)^blocklist\s+drop\s+xdpt0\s+drop\s+3\s+\S+\s+src_prefix 3 IPv4, 1 IPv6$`,
		`(?m)^ntp-limit\s+limit\s+xdpt0\s+pass\s+0\s+0\s+protocol udp; dst_port 123,1000-1010; rate 1000/s burst 2000 per source /32, /64$`,
		`(?m)^\s+xdpt0\s+drop\s+0\s+0$`,
		`(?m)^blocklist\s+src_prefix\s+1\s+0\s+\(config\)\s+config$`,
		`(?m)^blocklist\s+src_prefix_file\s+2\s+1\s+` + regexp.QuoteMeta(list) + `\s+loaded$`,
	} {
		require.Regexp(t, re, human)
	}

	// Nothing was detached, replaced or reset: the same program counts on.
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur)
	send(udp("203.0.113.5", 9), 5)
	attached, gotID, packets := gatherState(t, instance, "udp", "drop")
	require.True(t, attached)
	require.Equal(t, int64(id), gotID)
	require.Equal(t, int64(7+3+5), packets, "the instance's own count of UDP dropped")
	require.NotContains(t, instance.stderr.String(), "E! ")
}

// TestStatusWithoutInstance: with no instance on the interface, -status
// says no instance holds it, attaches nothing, and exits 1; the rules are
// still described, without hits.
func TestStatusWithoutInstance(t *testing.T) {
	ns := testns.New(t)
	require.NoError(t, ns.Do(func() error { return ns.CheckAttachable(testns.Dev) }))
	list := writeList(t)
	confPath := writeConfig(t, statusConfig(list))

	human, errOut, code := runStatusCmd(t, ns, confPath)
	t.Logf("-status:\n%s", human)
	require.Equal(t, 1, code, "stderr: %s", errOut)
	require.Regexp(t, `(?m)^xdpt0\s+-\s+-\s+not attached: interface "xdpt0": no xdp_drop instance holds it: no XDP program is attached, and this read-only run attaches none$`, human)
	require.Regexp(t, `(?m)^dns\s+pass\s+-\s+-\s+-\s+-\s+protocol udp; dst_port 53$`, human)

	out, _, code := runStatusCmd(t, ns, confPath, "-json")
	require.Equal(t, 1, code)
	var got statusReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.Interfaces, 1)
	require.False(t, got.Interfaces[0].Attached)
	require.Contains(t, got.Interfaces[0].Error, "no xdp_drop instance holds it")
	require.Len(t, got.Rules, 3)
	require.Empty(t, got.Rules[0].Hits)

	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Zero(t, cur, "-status attached a program")
}

// TestStatusPrefixFileError: a prefix file that no longer parses is shown
// with its error (file and line) rather than failing the run; the
// instance, which goes on with the prefixes it loaded, is still read.
func TestStatusPrefixFileError(t *testing.T) {
	ns := testns.New(t)
	list := writeList(t)
	conf := statusConfig(list)
	start(t, ns, conf)
	id := waitAttached(t, ns, testns.Dev)
	require.NoError(t, os.WriteFile(list, []byte("198.18.0.0/15\nnot-a-prefix\n"), 0o644))

	out, errOut, _ := runStatusCmd(t, ns, writeConfig(t, conf), "-json")
	t.Logf("-status -json:\n%s\nstderr:\n%s", out, errOut)
	var got statusReport
	require.NoError(t, json.Unmarshal([]byte(out), &got), "stderr: %s", errOut)
	src := got.Rules[1].Sources[1]
	require.Equal(t, list, src.File)
	require.Equal(t, "error", src.State)
	require.Contains(t, src.Error, list+":2")
	// The instance is read all the same: how many prefixes it holds changes
	// the layout of its prefix table, not what its counters mean.
	require.True(t, got.Interfaces[0].Attached, "error: %s", got.Interfaces[0].Error)
	require.Equal(t, int64(id), got.Interfaces[0].ProgramID)
	cur, err := ns.XDPProgramID(testns.Dev)
	require.NoError(t, err)
	require.Equal(t, id, cur)
}

// TestStatusFlags: -json alone, and -status with -watch, name the flags
// that go together and exit 2.
func TestStatusFlags(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-json"}, "E! -json prints -status as JSON: add -status, or leave -json out"},
		{[]string{"-status", "-watch"}, "E! -status prints once and -watch every second: give one of them"},
	} {
		out, err := exec.Command(binary, append([]string{"-config", "/nonexistent"}, c.flags...)...).CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v: %s", c.flags, out)
		require.Equal(t, 2, exit.ExitCode(), "%v: %s", c.flags, out)
		require.Contains(t, string(out), c.want)
	}
}

// TestStatusUnderFileCapabilities: with only the installed binary's file
// capabilities, which cannot open another process's program by its id,
// -status says to run it as root, and exits 1; the instance stays.
func TestStatusUnderFileCapabilities(t *testing.T) {
	out, id := runBesideUnderFileCapabilities(t, "-status")
	require.Contains(t, out, fmt.Sprintf("not attached: interface %q: read the counters of the running instance: XDP program id %d: opening another process's XDP program by its id needs CAP_SYS_ADMIN: run -status as root (sudo)", testns.Dev, id))
}
