//go:build linux

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// BansInForce counts the bans in force in the ban maps the program runs
// on, by origin: those whose end is still ahead, allowed prefixes left
// out. It only reads, so a view of another process's program (Observe)
// shows what that instance has in force without a ban table of its own.
func (p *Program) BansInForce() (byOrigin [BanOrigins]int, err error) {
	if !p.in.policy.Bans.On {
		return byOrigin, nil
	}
	info, err := p.objs.Prog.Info()
	if err != nil {
		return byOrigin, fmt.Errorf("read XDP program info: %w", err)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return byOrigin, errors.New("the kernel does not list the program's maps (before 4.15)")
	}
	now, found := monoClock(), 0
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return byOrigin, fmt.Errorf("open map id %d: %w", id, err)
		}
		mi, err := m.Info()
		if err == nil && (mi.Name == xdpDropMapBanV4 || mi.Name == xdpDropMapBanV6) {
			found++
			err = countInForce(m, now, &byOrigin)
		}
		m.Close()
		if err != nil {
			return byOrigin, fmt.Errorf("read the bans in force: %w", err)
		}
	}
	if found != 2 {
		return byOrigin, errors.New("the program has no ban maps")
	}
	return byOrigin, nil
}

// countInForce adds to byOrigin each origin's claims in m whose end is
// after now: a prefix two origins ban counts for both, as each origin's
// active does.
func countInForce(m *ebpf.Map, now uint64, byOrigin *[BanOrigins]int) error {
	var v xdpDropBanValue
	key := make([]byte, m.KeySize())
	it := m.Iterate()
	for it.Next(key, &v) {
		if v.Kind == uint8(xdpDropBanLimitsBAN_KIND_ALLOW) {
			continue
		}
		for o := range BanOrigins {
			if valueOf(v).claims[o] > now {
				byOrigin[o]++
			}
		}
	}
	return it.Err()
}
