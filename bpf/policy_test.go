package bpf

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFingerprintLineAsBefore: a rule reaches the fingerprint as the %q
// verb wrote it before, byte for byte and never clipped, so counters pinned
// by an earlier version continue under the same fingerprint.
func TestFingerprintLineAsBefore(t *testing.T) {
	long := "/etc/telegraf-xdp-drop/" + strings.Repeat("lists/", 30) + "drop.txt"
	ports := []PortRange{{Lo: 53, Hi: 53}, {Lo: 1000, Hi: 1999}}
	for _, r := range []Rule{
		{Name: "dns", Drop: true, Protocols: []uint8{17}, DstPorts: ports},
		{Name: `odd"name\x`, Protocols: []uint8{6}, SrcPrefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, DstPrefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}},
		{Name: "files", Drop: true, PrefixFiles: []string{"/etc/a.txt", long, "/tmp/é \x01"}, SrcPorts: ports},
	} {
		var before string
		if len(r.PrefixFiles) > 0 {
			before = fmt.Sprintf("rule %q %v %v files %q %v %v\n", r.Name, r.Drop, r.Protocols, r.PrefixFiles, r.SrcPorts, r.DstPorts)
		} else {
			before = fmt.Sprintf("rule %q %v %v %v %v %v %v\n", r.Name, r.Drop, r.Protocols, r.SrcPrefixes, r.DstPrefixes, r.SrcPorts, r.DstPorts)
		}
		require.Equal(t, before, r.fingerprintLine(), r.Name)
	}
}
