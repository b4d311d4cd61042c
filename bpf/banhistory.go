//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BanHistoryMax bounds the sources the ban history holds: the detector's
// own bound on its offence history, which it mirrors.
const BanHistoryMax = 65_536

// banHistorySpec is the ban history: a hash made from user space alone,
// which no program references (the per-frame path never reads it), kept
// in the kernel only so that it is handed over with the ban maps. Not
// preallocated: an entry takes 120 bytes of kernel memory as the kernel
// accounts it (its hash element, key and value), 7.9 MB at most for
// BanHistoryMax sources (TestBanHistoryBounded measures it).
var banHistorySpec = ebpf.MapSpec{
	Name:       "ban_history",
	Type:       ebpf.Hash,
	KeySize:    20, // banHistoryKey
	ValueSize:  24, // banHistoryValue
	MaxEntries: BanHistoryMax,
	Flags:      unix.BPF_F_NO_PREALLOC,
}

// historyMark separates the history's description from the ban maps'.
const historyMark = "|history:"

// historyLayout names the layout of the history's entries.
const historyLayout = "v1"

type banHistoryKey struct {
	Family, Len uint8 // family: 0 IPv4, 1 IPv6
	_           [2]uint8
	Addr        [16]byte
}

type banHistoryValue struct {
	Count    uint32
	_        uint32
	Duration uint64 // ns
	End      uint64 // monotonic ns
}

// BanRecord is a source's last ban as the history keeps it: its offence
// count, duration and end.
type BanRecord struct {
	Prefix   netip.Prefix
	Count    int
	Duration time.Duration
	End      time.Time
}

func historyKey(p netip.Prefix) banHistoryKey {
	k := banHistoryKey{Family: uint8(family(p)), Len: uint8(p.Bits())}
	a := p.Addr().As16()
	if p.Addr().Is4() {
		a4 := p.Addr().As4()
		a = [16]byte{}
		copy(a[:], a4[:])
	}
	k.Addr = a
	return k
}

func (k banHistoryKey) prefix() netip.Prefix {
	if k.Family == 0 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(k.Addr[:4])), int(k.Len))
	}
	return netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Len))
}

// Remember writes r, a ban just made, in the table's history, which a
// reload hands over with the bans; the entries past their end by more
// than maxAge make room when it is full, then an eighth of the others.
func (t *BanTable) Remember(r BanRecord, maxAge time.Duration) error {
	wallNow, monoNow := time.Now(), monoClock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.history == nil {
		m, err := ebpf.NewMap(&banHistorySpec)
		if err != nil {
			return fmt.Errorf("create map %s: %w", banHistorySpec.Name, err)
		}
		t.history = m
	}
	k := historyKey(r.Prefix)
	v := banHistoryValue{Count: uint32(r.Count), Duration: uint64(r.Duration), End: monoOf(r.End, wallNow, monoNow)}
	err := t.history.Put(k, v)
	if errors.Is(err, unix.E2BIG) {
		t.pruneHistory(monoOf(wallNow.Add(-maxAge), wallNow, monoNow), true)
		err = t.history.Put(k, v)
	}
	if err != nil {
		return fmt.Errorf("write %s to map %s: %w", r.Prefix, banHistorySpec.Name, err)
	}
	return nil
}

// pruneHistory deletes the entries that ended before oldest and, with
// room, an eighth of the map's bound more when that frees too little.
func (t *BanTable) pruneHistory(oldest uint64, room bool) {
	var k banHistoryKey
	var v banHistoryValue
	var stale, other []banHistoryKey
	it := t.history.Iterate()
	for it.Next(&k, &v) {
		if v.End < oldest {
			stale = append(stale, k)
		} else if room {
			other = append(other, k)
		}
	}
	if room && len(stale) < BanHistoryMax/8 {
		stale = append(stale, other[:min(len(other), BanHistoryMax/8-len(stale))]...)
	}
	for _, k := range stale {
		_ = t.history.Delete(k) // gone meanwhile is as good
	}
}

// History returns the sources of the history whose last ban ended less
// than maxAge ago (or is in force), as a reload handed them over, and
// deletes the others.
func (t *BanTable) History(maxAge time.Duration) ([]BanRecord, error) {
	wallNow, monoNow := time.Now(), monoClock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.history == nil {
		return nil, nil
	}
	oldest := monoOf(wallNow.Add(-maxAge), wallNow, monoNow)
	t.pruneHistory(oldest, false)
	var out []BanRecord
	var k banHistoryKey
	var v banHistoryValue
	it := t.history.Iterate()
	for it.Next(&k, &v) {
		if v.End < oldest {
			continue
		}
		end := wallNow.Add(time.Duration(int64(v.End - monoNow))).Round(0)
		out = append(out, BanRecord{Prefix: k.prefix(), Count: int(v.Count), Duration: time.Duration(v.Duration), End: end})
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("read map %s: %w", banHistorySpec.Name, err)
	}
	return out, nil
}

// historyToHand is the history's descriptor and description, to hand over
// after the ban maps; nothing before a ban was remembered.
func (t *BanTable) historyToHand() (fd int, describe string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.history == nil {
		return 0, "", false
	}
	return t.history.FD(), historyMark + historyLayout, true
}

// takeHistory takes the history's descriptor, the last of h's, off h;
// none when h has no history.
func takeHistory(h *HandedRules) (fd int, ok bool) {
	rest, layout, found := cutLast(h.describe, historyMark)
	if !found || len(h.fds) == 0 {
		return 0, false
	}
	h.describe = rest
	fd = h.fds[len(h.fds)-1]
	h.fds = h.fds[:len(h.fds)-1]
	if layout != historyLayout {
		closeFD(fd)
		return 0, false
	}
	return fd, true
}

// adoptHistory makes the handed history the table's when it is one; it
// owns fd. A history that does not fit is dropped: offences start again.
func (t *BanTable) adoptHistory(fd int) {
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		return // closed by NewMapFromFD
	}
	if banHistorySpec.Compatible(m) != nil {
		m.Close()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.history != nil {
		t.history.Close()
	}
	t.history = m
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
