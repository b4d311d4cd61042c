package bans

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanonical: an IPv4-mapped IPv6 prefix of length 97 or more is the
// IPv4 prefix of length − 96 (as the ban table would make it); one of
// /96 (all of IPv4) and any shorter IPv6 prefix holding the mapped block
// are refused; other 4-in-6 forms, which the table keeps as IPv6, and
// every other prefix stay as they are, masked.
func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, out, why string }{
		{"::ffff:10.77.0.254/128", "10.77.0.254/32", ""},
		{"::ffff:10.77.0.254/120", "10.77.0.0/24", ""},
		{"::ffff:10.77.0.0/97", "0.0.0.0/1", ""},
		{"::ffff:0:0/96", "::ffff:0.0.0.0/96", "every IPv4-mapped address"},
		{"::/64", "::/64", "holds the IPv4-mapped addresses ::ffff:0:0/96"},
		{"::ffff:0:0/95", "::fffe:0:0/95", "holds the IPv4-mapped addresses"},
		{"::/0", "::/0", "holds the IPv4-mapped addresses"},
		{"::10.77.0.254/128", "::a4d:fe/128", ""},               // IPv4-compatible: kept IPv6
		{"64:ff9b::10.77.0.254/128", "64:ff9b::a4d:fe/128", ""}, // NAT64: kept IPv6
		{"2001:db8::7/64", "2001:db8::/64", ""},
		{"10.77.0.7/24", "10.77.0.0/24", ""},
	} {
		got, why := Canonical(netip.MustParsePrefix(tc.in))
		require.Equal(t, tc.out, got.String(), tc.in)
		if tc.why == "" {
			require.Empty(t, why, tc.in)
		} else {
			require.Contains(t, why, tc.why, tc.in)
		}
	}
	// What Canonical returns, the ban table keeps as it is.
	p, _ := Canonical(netip.MustParsePrefix("::ffff:192.0.2.1/128"))
	again, why := Canonical(p)
	require.Equal(t, p, again)
	require.Empty(t, why)
}
