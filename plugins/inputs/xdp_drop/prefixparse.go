package xdp_drop

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// MaxPrefixFileSize bounds a prefix file: the largest public lists
// (FireHOL level 3, a country's ranges) are a few MiB.
const MaxPrefixFileSize = 64 << 20

// maxPrefixLine bounds a line of a prefix file: a longer one is no prefix
// list's, and reading stops there.
const maxPrefixLine = 4096

// ParsePrefixFile reads a prefix list: one prefix or address (a /32 or
// /128) per line, IPv4 and IPv6 mixed, blank lines, and comments from # or
// ; to the end of the line, as Spamhaus DROP and FireHOL netsets write
// them. name is the file's, for errors, which say name:line and what is
// wrong. It returns the prefixes (with repeats) and the SHA-256 of the
// bytes read. A last line without a newline is refused, as a file caught
// mid-write would be; so are more prefixes of a family than every rule
// together may hold, a line longer than 4 KiB and more than 64 MiB.
func ParsePrefixFile(r io.Reader, name string) ([]netip.Prefix, [sha256.Size]byte, error) {
	return parsePrefixList(r, name, 1)
}

// parsePrefixList is ParsePrefixFile reporting up to maxErrs lines that are
// no prefix, joined, and how many more there are; an error that stops
// reading (a line too long, no last newline, too large, too many prefixes)
// ends the list.
func parsePrefixList(r io.Reader, name string, maxErrs int) ([]netip.Prefix, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(r, h), maxPrefixLine)
	var out []netip.Prefix
	var bad []error
	var n FamilyCount
	var size, more int
	stop := func(err error) ([]netip.Prefix, [sha256.Size]byte, error) {
		return nil, sum, errors.Join(append(bad, moreLines(name, more), err)...)
	}
	for line := 1; ; line++ {
		raw, err := br.ReadSlice('\n')
		size += len(raw)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return stop(fmt.Errorf("%s:%d: longer than %d bytes; a prefix file holds one prefix per line", name, line, maxPrefixLine))
		case err == io.EOF && len(raw) > 0:
			return stop(fmt.Errorf("%s:%d: the last line has no newline, as in a file caught mid-write; "+
				"write the list to a temporary file and rename it into place (end the last line with a newline)", name, line))
		case err == io.EOF && len(bad) > 0:
			return stop(nil)
		case err == io.EOF:
			copy(sum[:], h.Sum(nil))
			return out, sum, nil
		case err != nil:
			return stop(fmt.Errorf("%s: %w", name, err))
		case size > MaxPrefixFileSize:
			return stop(fmt.Errorf("%s: larger than %d bytes (64 MiB); a prefix file has at most that", name, MaxPrefixFileSize))
		}
		text := raw
		if i := bytes.IndexAny(text, "#;"); i >= 0 {
			text = text[:i]
		}
		text = bytes.TrimSpace(text)
		if len(text) == 0 {
			continue
		}
		p, err := parsePrefix(string(text), notListedPrefix)
		if err != nil {
			if len(bad) < maxErrs {
				bad = append(bad, fmt.Errorf("%s:%d: %w", name, line, err))
			} else {
				more++
			}
			if maxErrs <= 1 {
				return stop(nil)
			}
			continue
		}
		n.add(1, p)
		if n.IPv4 > bpf.MaxPrefixes || n.IPv6 > bpf.MaxPrefixes {
			return stop(fmt.Errorf("%s:%d: more than %d prefixes of a family; at most that many fit every rule together: shorten the list", name, line, bpf.MaxPrefixes))
		}
		out = append(out, p)
	}
}

// moreLines counts the bad lines of a file past those reported; nil for none.
func moreLines(name string, more int) error {
	switch more {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: 1 more line is no prefix", name)
	}
	return fmt.Errorf("%s: %d more lines are no prefix", name, more)
}

// What the refusal of a text that is neither a prefix nor an address says
// after it, as the options and the files are written.
const (
	notOptionPrefix = `is not an address prefix; write prefixes such as "192.0.2.0/24" or "2001:db8::/32"`
	notListedPrefix = `is not an address prefix or address; write one per line, such as "192.0.2.0/24" or "2001:db8::1"`
)

// parsePrefixes reads the prefixes of src_prefix or dst_prefix. A prefix
// listed twice, however spelt, is refused: in a pasted list it is more
// likely a mistake than meant.
func parsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	seen := make(map[netip.Prefix]string, len(list))
	for _, s := range list {
		p, err := parsePrefix(s, notOptionPrefix)
		if err != nil {
			return nil, err
		}
		switch first, dup := seen[p]; {
		case dup && first == s:
			return nil, fmt.Errorf("%s is listed twice; list each prefix once", quote.Value(s))
		case dup:
			return nil, fmt.Errorf("%s and %s are the same prefix; list each prefix once", quote.Value(first), quote.Value(s))
		}
		seen[p] = s
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// parsePrefix reads one prefix of an option or a list; a bare address is a
// host prefix. notPrefix refuses a text that is neither.
func parsePrefix(s, notPrefix string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return p, fmt.Errorf("%s %s", quote.Value(s), notPrefix)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("%s is an IPv4-mapped IPv6 prefix, which IPv4 frames never carry; write the IPv4 prefix", quote.Value(s))
	}
	if m := p.Masked(); m != p {
		return p, fmt.Errorf("%s has host bits set; did you mean %s?", quote.Value(s), quote.Value(m.String()))
	}
	return p, nil
}

// uniquePrefixes sorts ps and drops repeats: lists overlap, and the union
// is what the rule matches.
func uniquePrefixes(ps []netip.Prefix) []netip.Prefix {
	if len(ps) == 0 {
		return nil
	}
	slices.SortFunc(ps, comparePrefixes)
	return slices.Compact(ps)
}

// comparePrefixes orders prefixes by address, then length.
func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// FamilyCount counts prefixes by family.
type FamilyCount struct{ IPv4, IPv6 int }

// add counts the prefixes ps in c (sign 1), or takes them away (sign -1).
func (c *FamilyCount) add(sign int, ps ...netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() {
			c.IPv4 += sign
		} else {
			c.IPv6 += sign
		}
	}
}

// familyCounts counts the prefixes of the lists by family.
func familyCounts(lists ...[]netip.Prefix) (v4, v6 int) {
	var c FamilyCount
	for _, ps := range lists {
		c.add(1, ps...)
	}
	return c.IPv4, c.IPv6
}
