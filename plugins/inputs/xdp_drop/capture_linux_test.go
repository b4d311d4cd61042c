//go:build linux

package xdp_drop

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/influxdata/telegraf/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdp-drop/xdp_drop/internal/pcapng"
	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// reachable makes dir's parents (t.TempDir's, 0700) passable by other
// users, so that they can put files in dir once it lets them.
func reachable(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o011))
			t.Cleanup(func() { os.Chmod(d, fi.Mode().Perm()) })
		}
	}
}

// asNobody runs a command as user nobody, another local user.
func asNobody(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// capturePlugin is the plugin sampling every frame into a capture at path,
// with room in the kernel's cap and ring for every frame a test sends.
func capturePlugin(path string, log *captureLog) *XDPDrop {
	p := newSampling(1)
	p.Log = log
	p.SampleMaxPerSecond = MaxSampleMaxPerSecond
	p.CapturePath, p.CaptureSnaplen = path, 64
	return p
}

// linkFields are the fields of the test interface's xdp_drop_link point.
func linkFields(t *testing.T, acc *testutil.Accumulator) map[string]any {
	t.Helper()
	links := metricsNamed(acc, MeasurementLink)
	require.Len(t, links, 1)
	return links[0].Fields()
}

// droppedPackets sums the packets of the xdp_drop points of action drop.
func droppedPackets(acc *testutil.Accumulator) uint64 {
	var n uint64
	for _, m := range metricsNamed(acc, MeasurementCounters) {
		if m.Tags()[TagAction] == ActionDrop {
			v, _ := m.GetField(FieldPackets)
			n += v.(uint64)
		}
	}
	return n
}

// gather gathers once and returns what it reported.
func gather(t *testing.T, ns *testns.NS, p *XDPDrop) *testutil.Accumulator {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Gather(acc) })
	return acc
}

// captured reads the capture files with tshark and counts their frames by
// source address; tshark must read every file to its end.
func captured(t *testing.T, paths ...string) map[string]int {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		if os.Getenv("XDP_DROP_REQUIRE_PRIVILEGED") != "" {
			t.Fatal("tshark is not installed (apt-get install tshark): CI reads the capture back with it")
		}
		t.Skip("tshark is not installed (apt-get install tshark)")
	}
	n := map[string]int{}
	for _, p := range paths {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			continue
		}
		cmd := exec.Command("tshark", "-r", p, "-T", "fields", "-e", "ip.src")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "tshark -r %s: %s", p, stderr.String())
		for _, src := range strings.Fields(string(out)) {
			n[src]++
		}
	}
	return n
}

var (
	srcBefore = netip.MustParseAddr("192.0.2.1")
	srcAfter  = netip.MustParseAddr("192.0.2.2")
)

// TestCaptureObstructedAtStart: another user's file at capture_path (put
// there after Init, in a directory opened to all as /tmp is) does not keep
// the filter from attaching: the frames are dropped, the problem is in the
// log and on xdp_drop_link with the frames not written, and the capture
// starts at the first gather after the file is gone.
func TestCaptureObstructedAtStart(t *testing.T) {
	ns := testns.New(t)
	dir := t.TempDir()
	reachable(t, dir)
	path := filepath.Join(dir, "drops.pcapng")
	log := &captureLog{}
	p := capturePlugin(path, log)
	require.NoError(t, p.Init())
	require.NoError(t, os.Chmod(dir, os.ModeSticky|0o777))
	asNobody(t, "touch", path)

	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, p, func() error { p.Stop(); return nil }) })
	require.Len(t, acc.Errors, 1)
	require.ErrorContains(t, acc.Errors[0], `capture_path = "`+path+`": `+path+" is a file owned by uid 65534, not this user (uid 0); remove it or choose another path; the filter goes on")

	sendFrames(t, ns, udpFrameFrom(srcBefore, 18), 50)
	waitSamplesRead(t, p, 50)
	g := gather(t, ns, p)
	require.Empty(t, g.Errors, "reported once")
	require.Equal(t, uint64(50), droppedPackets(g), "the filter drops")
	f := linkFields(t, g)
	require.Equal(t, true, f[FieldAttached])
	require.Equal(t, uint64(50), f[FieldSampled])
	require.Equal(t, uint64(50), f[FieldCaptureLost])
	require.Contains(t, f[FieldCaptureError], path+" is a file owned by uid 65534")

	asNobody(t, "rm", path)
	g = gather(t, ns, p)
	require.NotContains(t, linkFields(t, g), FieldCaptureError, "opened at the gather")
	require.Contains(t, strings.Join(log.infos, "\n"), `capture_path = "`+path+`": writing again, after 50 sampled frames not written`)
	sendFrames(t, ns, udpFrameFrom(srcAfter, 18), 30)
	waitSamplesRead(t, p, 80)
	f = linkFields(t, gather(t, ns, p))
	require.Equal(t, uint64(80), f[FieldSampled])
	require.Equal(t, uint64(50), f[FieldCaptureLost])
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	require.Equal(t, map[string]int{srcAfter.String(): 30}, captured(t, path))
}

// TestCaptureRotationBlocked: a directory another user put at <path>.1
// blocks the rotation: the first error is reported, every frame not
// written is counted, and once it is gone the rotation is tried again at
// the next gather and every later frame is written.
func TestCaptureRotationBlocked(t *testing.T) {
	ns := testns.New(t)
	dir := t.TempDir()
	reachable(t, dir)
	path := filepath.Join(dir, "drops.pcapng")
	p := capturePlugin(path, &captureLog{})
	p.CaptureMaxSize, p.CaptureFiles = pcapng.MinSize, 3
	require.NoError(t, p.Init())
	require.NoError(t, os.Chmod(dir, os.ModeSticky|0o777))
	startPluginInitialised(t, ns, p)
	asNobody(t, "mkdir", path+".1")

	// 1000 frames of 92-byte blocks: about 700 fit before the rotation.
	const n = 1000
	sendFrames(t, ns, udpFrameFrom(srcBefore, 18), n)
	waitSamplesRead(t, p, n)
	g := gather(t, ns, p)
	require.Len(t, g.Errors, 1)
	require.ErrorContains(t, g.Errors[0], "rotate capture file: "+path+".1 is not a regular file but a directory")
	f := linkFields(t, g)
	lost := f[FieldCaptureLost].(uint64)
	require.NotZero(t, lost)
	require.Contains(t, f[FieldCaptureError], "rotate capture file: "+path+".1 is not a regular file but a directory")

	asNobody(t, "rmdir", path+".1")
	gather(t, ns, p)
	sendFrames(t, ns, udpFrameFrom(srcAfter, 18), n)
	waitSamplesRead(t, p, 2*n)
	f = linkFields(t, gather(t, ns, p))
	require.NotContains(t, f, FieldCaptureError)
	require.Equal(t, uint64(2*n), f[FieldSampled])
	require.Equal(t, lost, f[FieldCaptureLost], "no frame lost after the obstruction went")
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	got := captured(t, path, path+".1", path+".2", path+".3")
	require.Equal(t, n, got[srcAfter.String()], "every frame after the obstruction went")
	require.Equal(t, n, got[srcBefore.String()]+int(lost), "every frame before it written or counted lost")
}

// startPluginInitialised starts p, already initialised, in the namespace,
// and stops it when the test ends.
func startPluginInitialised(t *testing.T, ns *testns.NS, p *XDPDrop) *testutil.Accumulator {
	t.Helper()
	acc := &testutil.Accumulator{}
	inNS(t, ns, p, func() error { return p.Start(acc) })
	t.Cleanup(func() { inNS(t, ns, p, func() error { p.Stop(); return nil }) })
	return acc
}

// TestCaptureDiskFull: a full disk leaves no part of a block in the
// capture: tshark reads it to its end, the frames not written are counted,
// and once there is room again every frame is written.
func TestCaptureDiskFull(t *testing.T) {
	ns := testns.New(t)
	dir := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=48k,mode=0700"))
	t.Cleanup(func() { require.NoError(t, unix.Unmount(dir, unix.MNT_DETACH)) })
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 32<<10), 0o600))
	path := filepath.Join(dir, "drops.pcapng")
	p := capturePlugin(path, &captureLog{})
	startPlugin(t, ns, p)

	// 16 KiB left: about 170 blocks of 92 bytes.
	const before, after = 300, 200
	sendFrames(t, ns, udpFrameFrom(srcBefore, 18), before)
	waitSamplesRead(t, p, before)
	g := gather(t, ns, p)
	require.Len(t, g.Errors, 1)
	require.ErrorContains(t, g.Errors[0], "write capture file: write "+path+": no space left on device")
	lost := linkFields(t, g)[FieldCaptureLost].(uint64)
	require.NotZero(t, lost)

	require.NoError(t, os.Remove(filler))
	gather(t, ns, p)
	sendFrames(t, ns, udpFrameFrom(srcAfter, 18), after)
	waitSamplesRead(t, p, before+after)
	f := linkFields(t, gather(t, ns, p))
	require.Equal(t, uint64(before+after), f[FieldSampled])
	require.Equal(t, lost, f[FieldCaptureLost])
	require.NotContains(t, f, FieldCaptureError)
	inNS(t, ns, p, func() error { p.Stop(); return nil })
	got := captured(t, path)
	require.Equal(t, after, got[srcAfter.String()], "every frame sampled once there was room")
	require.Equal(t, before, got[srcBefore.String()]+int(lost), "every frame before written or counted lost")
}

// TestCaptureContinuesAcrossReload: three runs of the plugin (a Telegraf
// reload is a new process) write one capture: nothing rotates before
// capture_max_size, and every run's frames are in it.
func TestCaptureContinuesAcrossReload(t *testing.T) {
	ns := testns.New(t)
	path := filepath.Join(t.TempDir(), "drops.pcapng")
	want := map[string]int{}
	for run := 0; run < 3; run++ {
		p := capturePlugin(path, &captureLog{})
		startPlugin(t, ns, p)
		src := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + run)})
		sendFrames(t, ns, udpFrameFrom(src, 18), 10+run)
		waitSamplesRead(t, p, uint64(10+run))
		require.NotContains(t, linkFields(t, gather(t, ns, p)), FieldCaptureError)
		inNS(t, ns, p, func() error { p.Stop(); return nil })
		want[src.String()] = 10 + run
	}
	_, err := os.Stat(path + ".1")
	require.ErrorIs(t, err, os.ErrNotExist, "no rotation before capture_max_size")
	require.Equal(t, want, captured(t, path), fmt.Sprintf("the frames of every run in %s", path))
}
