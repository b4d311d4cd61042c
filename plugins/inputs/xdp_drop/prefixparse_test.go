package xdp_drop

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/bpf"
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// TestParsePrefixFileFormats reads lists written as Spamhaus DROP and
// FireHOL netsets write them: comments after ; and #, headers, bare
// addresses as host prefixes.
func TestParsePrefixFileFormats(t *testing.T) {
	for _, c := range []struct {
		file string
		want []netip.Prefix
	}{
		{"spamhaus-drop.txt", mustPrefixes("1.10.16.0/20", "1.19.0.0/16", "2.56.192.0/22", "5.42.92.0/24", "223.254.0.0/16")},
		{"spamhaus-drop-v6.txt", mustPrefixes("2001:678:738::/48", "2a06:5280::/29")},
		{"firehol_level1.netset", mustPrefixes("0.0.0.0/8", "1.10.16.0/20", "5.188.10.179/32", "45.14.224.0/22", "185.234.216.59/32", "192.0.2.0/24", "100.64.0.0/10")},
	} {
		t.Run(c.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "prefixfiles", c.file))
			require.NoError(t, err)
			got, _, err := ParsePrefixFile(bytes.NewReader(raw), c.file)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
	got, _, err := ParsePrefixFile(strings.NewReader("192.0.2.1\r\n\t2001:db8::/32   # mixed, CRLF\r\n\n   \n; only a comment\n"), "mixed")
	require.NoError(t, err)
	require.Equal(t, mustPrefixes("192.0.2.1/32", "2001:db8::/32"), got)
}

// TestParsePrefixFileErrors names the file and the line and says what is
// wrong and what to write.
func TestParsePrefixFileErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"192.0.2.0/24\n192.0.2.1/24 ; SBL1\n", `list.txt:2: "192.0.2.1/24" has host bits set; did you mean "192.0.2.0/24"?`},
		{"# header\n\nexample.com\n", `list.txt:3: "example.com" is not an address prefix or address; write one per line`},
		{"192.0.2.0/33\n", `list.txt:1: "192.0.2.0/33" is not an address prefix`},
		{"fe80::1%eth0\n", `list.txt:1: "fe80::1%eth0" is not an address prefix`},
		{"::ffff:192.0.2.0/120\n", `list.txt:1: "::ffff:192.0.2.0/120" is an IPv4-mapped IPv6 prefix`},
		{"192.0.2.0/24\n198.51.10", `list.txt:2: the last line has no newline, as in a file caught mid-write; write the list to a temporary file and rename it into place`},
		{strings.Repeat("x", 5000) + "\n", `list.txt:1: longer than 4096 bytes`},
	} {
		_, _, err := ParsePrefixFile(strings.NewReader(c.text), "list.txt")
		require.ErrorContains(t, err, c.want)
	}
}

// TestParsePrefixFileGarbage refuses 64 MiB of garbage at its first line,
// reading a few KiB, and more than a family's limit of prefixes as soon as
// the limit is passed.
func TestParsePrefixFileGarbage(t *testing.T) {
	garbage := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte{0xa5}, MaxPrefixFileSize))}
	start := time.Now()
	_, _, err := ParsePrefixFile(garbage, "garbage")
	require.ErrorContains(t, err, "garbage:1: longer than 4096 bytes")
	require.Less(t, garbage.n, 64<<10, "bytes read")
	t.Logf("64 MiB of garbage refused after %d bytes in %s", garbage.n, time.Since(start))

	lines := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte("garbage line\n"), MaxPrefixFileSize/13))}
	_, _, err = ParsePrefixFile(lines, "lines")
	require.ErrorContains(t, err, `lines:1: "garbage line" is not an address prefix`)
	require.Less(t, lines.n, 64<<10, "bytes read")

	var many bytes.Buffer
	for i := range bpf.MaxPrefixes + 1 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		many.WriteString(a.String() + "\n")
	}
	_, _, err = ParsePrefixFile(&many, "many")
	require.ErrorContains(t, err, "many:100001: more than 100000 prefixes of a family")
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// TestParsePrefixOptionAndList: the options and the files read prefixes
// with one parser; each refuses what is neither prefix nor address in its
// own words, and the rest alike.
func TestParsePrefixOptionAndList(t *testing.T) {
	got, err := parsePrefixes([]string{"192.0.2.1", "2001:db8::/32"})
	require.NoError(t, err)
	require.Equal(t, mustPrefixes("192.0.2.1/32", "2001:db8::/32"), got)
	_, err = parsePrefixes([]string{"example.com"})
	require.EqualError(t, err, `"example.com" is not an address prefix; write prefixes such as "192.0.2.0/24" or "2001:db8::/32"`)
	_, _, err = ParsePrefixFile(strings.NewReader("example.com\n"), "list.txt")
	require.EqualError(t, err, `list.txt:1: "example.com" is not an address prefix or address; write one per line, such as "192.0.2.0/24" or "2001:db8::1"`)
	for _, s := range []string{"192.0.2.1/24", "::ffff:192.0.2.0/120", "fe80::1%eth0"} {
		_, optErr := parsePrefixes([]string{s})
		_, _, listErr := ParsePrefixFile(strings.NewReader(s+"\n"), "list.txt")
		require.Error(t, optErr, s)
		if s != "fe80::1%eth0" {
			require.Equal(t, "list.txt:1: "+optErr.Error(), listErr.Error(), s)
		}
	}
}
