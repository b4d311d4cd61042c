//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// runCheck runs the binary with -check on config: its exit code, stdout and
// stderr. Its handover directory is runtime, to see that it makes none.
func runCheck(t *testing.T, config, runtime string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, "-config", config, "-check")
	cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+runtime)
	stdout, stderr, code := runSplit(t, cmd)
	return code, stdout, stderr
}

// runSplit runs cmd to its end and returns its stdout, its stderr and its
// exit code; any other failure to run it fails the test.
func runSplit(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestCheckValidConfig: -check on a valid config names the interfaces
// present in the configured namespace, each rule with its sizes (prefix
// files read) and the kernel memory, warns of a pattern that matches
// nothing, exits 0, and leaves the veth without XDP program, with no pin
// and no handover directory.
func TestCheckValidConfig(t *testing.T) {
	ns := testns.New(t)
	dir := t.TempDir()
	list := filepath.Join(dir, "drop.txt")
	require.NoError(t, os.WriteFile(list, []byte("; DROP\n192.0.2.0/24\n198.51.100.0/24 ; SBL\n2001:db8::/32\n"), 0o644))
	pins, runtime := filepath.Join(testns.BPFFS(t, 0o700), "pins"), filepath.Join(dir, "run")
	require.NoError(t, os.Mkdir(runtime, 0o755))
	config := writeConfig(t, fmt.Sprintf(`[[inputs.xdp_drop]]
  namespace = %q
  interfaces = [%q, "xdpt[1-9]", "nomatch*"]
  drop = ["udp"]
  pin_path = %q
  [[inputs.xdp_drop.rule]]
    name = "dns-per-source"
    action = "limit"
    protocol = ["udp"]
    dst_port = [53, "5353"]
    rate = 1000
  [[inputs.xdp_drop.rule]]
    name = "spamhaus-drop"
    action = "drop"
    src_prefix_file = [%q]
`, ns.Name, testns.Dev, pins, list))

	code, stdout, stderr := runCheck(t, config, runtime)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Contains(t, stdout, "config "+config+": valid; nothing attached (-check)")
	require.Regexp(t, `(?m)^interfaces in namespace "`+ns.Name+`": 2 would be attached now, in native mode$`, stdout)
	require.Regexp(t, `(?m)^  xdpt0 +named\n  xdpt1 +matched by "xdpt\[1-9\]"$`, stdout)
	require.Regexp(t, `(?m)^  1 dns-per-source +limit 1 protocol, 2 dst_port entries, rate 1,000/s burst 1,000$`, stdout)
	require.Regexp(t, `(?m)^  2 spamhaus-drop +drop  src prefixes 2 IPv4 \+ 1 IPv6, 1 prefix file$`, stdout)
	require.Regexp(t, `(?m)^rule maps \(once, shared by every interface\): 3 prefixes \(2 IPv4, 1 IPv6\): .*, 131,072 port masks, [\d,]+ limiter cells$`, stdout)
	require.Regexp(t, `(?m)^kernel memory, at most: rule maps [0-9.]+ MB; each interface [0-9.]+ KB \(counters, [0-9.]+ KB per CPU on \d+ CPUs?\); [0-9.]+ MB for the 2 interfaces present now$`, stdout)
	require.Equal(t, `W! config `+config+`:3: interfaces: the pattern "nomatch*" matches no interface now in namespace "`+ns.Name+`"; interfaces it matches later are attached at the gather after they appear`,
		strings.TrimSpace(stderr), "a warning, on stderr")

	for _, dev := range []string{testns.Dev, testns.Peer} {
		id, err := ns.XDPProgramID(dev)
		require.NoError(t, err)
		require.Zero(t, id, "%s has an XDP program after -check", dev)
	}
	require.NoDirExists(t, pins, "-check pins nothing")
	left, err := os.ReadDir(runtime)
	require.NoError(t, err)
	require.Empty(t, left, "-check makes no handover directory")
}

// TestCheckPinPathNoBPFFS: a pin_path on no BPF filesystem (a plain
// directory, as /sys/fs/bpf is on a host that never mounted one) is a
// warning with its line that names the mount to make and what a start then
// does, not an error: -check exits 0, and mounts and creates nothing.
func TestCheckPinPathNoBPFFS(t *testing.T) {
	ns := testns.New(t)
	pins := filepath.Join(t.TempDir(), "xdp_drop")
	config := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  namespace = %q\n  interfaces = [%q]\n  drop = [\"udp\"]\n  pin_path = %q\n  keep_attached = true\n", ns.Name, testns.Dev, pins))
	code, stdout, stderr := runCheck(t, config, t.TempDir())
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Contains(t, stdout, "config "+config+": valid; nothing attached (-check)")
	require.Equal(t, fmt.Sprintf("W! config %s:5: pin_path unusable: %s is not on a BPF filesystem: use a path under /sys/fs/bpf, or as root mount one there: mkdir -p %s && mount -t bpf bpf %s; the interfaces would be attached without pins",
		config, pins, pins, pins), strings.TrimSpace(stderr))
	require.NoDirExists(t, pins, "-check creates nothing")
}

// TestCheckReportsEveryError: two bad values on two lines, and an unknown
// key of a rule, are each reported with their line, on stderr; nothing on
// stdout; exit 1. A start reports them all the same.
func TestCheckReportsEveryError(t *testing.T) {
	config := writeConfig(t, `[[inputs.xdp_drop]]
  interfaces = ["a0"]
  mode = "turbo"
  drop = ["udp", "quic"]
  [[inputs.xdp_drop.rule]]
    name = "dns"
    action = "pass"
    protocol = ["udp"]
    dport = [53]
`)
	code, stdout, stderr := runCheck(t, config, t.TempDir())
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	want := []string{
		`E! config ` + config + `:3: mode = "turbo" is not a mode; use "native" (default), "generic", "offload" or "auto"`,
		`E! config ` + config + `:4: drop: "quic" is not an IP protocol name; use ["all"], or IP protocol names or numbers 0-255 such as ["udp", "icmp", 47]`,
		`E! config ` + config + `:9: rule "dns": unknown key "dport"; a rule takes ` + ruleOptions,
	}
	require.Equal(t, want, strings.Split(strings.TrimSpace(stderr), "\n"))

	out, err := exec.Command(binary, "-config", config).CombinedOutput()
	require.Error(t, err)
	require.Equal(t, want[2:], strings.Split(strings.TrimSpace(string(out)), "\n"), "unknown keys stop a start before Init")
	require.NoError(t, os.WriteFile(config, []byte("[[inputs.xdp_drop]]\n  interfaces = [\"a0\"]\n  mode = \"turbo\"\n  drop = [\"udp\", \"quic\"]\n"), 0o600))
	out, err = exec.Command(binary, "-config", config).CombinedOutput()
	require.Error(t, err)
	require.Equal(t, want[:2], strings.Split(strings.TrimSpace(string(out)), "\n"))
}

// TestCheckPrefixFileLines: every bad line of a prefix file, up to 20, is
// reported with the file and its line and the config line that names it;
// the rest are counted.
func TestCheckPrefixFileLines(t *testing.T) {
	list := filepath.Join(t.TempDir(), "drop.txt")
	text := "192.0.2.0/24\n192.0.2.1/24\n"
	for i := range 22 {
		text += fmt.Sprintf("not-a-prefix-%d\n", i)
	}
	require.NoError(t, os.WriteFile(list, []byte(text), 0o644))
	config := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [\"a0\"]\n  [[inputs.xdp_drop.rule]]\n    name = \"list\"\n    action = \"drop\"\n    src_prefix_file = [%q]\n", list))
	code, stdout, stderr := runCheck(t, config, t.TempDir())
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	at := `E! config ` + config + `:6: rule "list": src_prefix_file: ` + list
	require.Len(t, lines, 21, stderr)
	require.Equal(t, at+`:2: "192.0.2.1/24" has host bits set; did you mean "192.0.2.0/24"?`, lines[0])
	require.Equal(t, at+`:3: "not-a-prefix-0" is not an address prefix or address; write one per line, such as "192.0.2.0/24" or "2001:db8::1"`, lines[1])
	require.Equal(t, at+`:21: "not-a-prefix-18" is not an address prefix or address; write one per line, such as "192.0.2.0/24" or "2001:db8::1"`, lines[19])
	require.Equal(t, at+`: 3 more lines are no prefix`, lines[20])
}

// TestCheckUntrustedFiles: -check holds the config and the files it names
// to the trust check for the user running it (here root): a prefix file
// and a config that others may write are refused, with the chmod to run,
// and the config's other errors are still reported.
func TestCheckUntrustedFiles(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "drop.txt")
	require.NoError(t, os.WriteFile(list, []byte("192.0.2.0/24\n"), 0o644))
	require.NoError(t, os.Chmod(list, 0o666))
	config := writeConfig(t, fmt.Sprintf("[[inputs.xdp_drop]]\n  interfaces = [\"a0\"]\n  [[inputs.xdp_drop.rule]]\n    name = \"list\"\n    action = \"drop\"\n    src_prefix_file = [%q]\n", list))
	code, stdout, stderr := runCheck(t, config, t.TempDir())
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Equal(t, `E! config `+config+`:6: rule "list": src_prefix_file: `+list+` is writable by its group and all users (mode 0666), who could then choose which traffic is dropped; run: chmod go-w `+list,
		strings.TrimSpace(stderr))

	require.NoError(t, os.Chmod(list, 0o644))
	require.NoError(t, os.WriteFile(config, []byte("[[inputs.xdp_drop]]\n  interfaces = [\"a0\"]\n  mode = \"turbo\"\n"), 0o600))
	require.NoError(t, os.Chmod(config, 0o646))
	code, _, stderr = runCheck(t, config, t.TempDir())
	require.Equal(t, 1, code)
	require.Equal(t, []string{
		`E! config ` + config + `: ` + config + ` is writable by all users (mode 0646), who could then choose which traffic is dropped; run: chmod go-w ` + config,
		`E! config ` + config + `:1: drop is empty; use ["all"], or IP protocol names or numbers 0-255 such as ["udp", "icmp", 47] (dry_run = true counts without dropping), or give rules or [inputs.xdp_drop.bans]`,
		`E! config ` + config + `:3: mode = "turbo" is not a mode; use "native" (default), "generic", "offload" or "auto"`,
	}, strings.Split(strings.TrimSpace(stderr), "\n"))
}
