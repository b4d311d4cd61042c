//go:build linux

package xdp_drop

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// observe opens, read-only, the program another process attached to the
// interface, of the policy the view runs. It reports whether the interface is
// observed, or why it cannot be; false with no error when no program is
// attached and the interface was never observed: the caller attaches its own.
func (c console) observe(ifc *iface, ifindex int, policy bpf.Policy) (bool, error) {
	id, err := bpf.XDPProgramID(ifindex)
	if err != nil {
		return false, nil // attaching looks it up again and says why
	}
	if id == 0 {
		if ifc.observer == "" {
			return false, nil
		}
		ifc.err = fmt.Errorf("interface %s: no XDP program attached now: the instance observed before has stopped; "+
			"its counters show again once one attaches (the console view attaches only to interfaces that are free when it starts)", quote.Value(ifc.name))
		return true, ifc.err
	}
	prog, at, err := bpf.Observe(ifindex, policy)
	var foreign *bpf.ExistingProgramError
	var mismatch *bpf.PolicyMismatchError
	switch {
	case errors.As(err, &foreign):
		ifc.err = fmt.Errorf("interface %s: %w: not xdp_drop's, so there are no counters to show, and it is left alone", quote.Value(ifc.name), err)
	case errors.As(err, &mismatch):
		ifc.err = fmt.Errorf("interface %s: %w; run %s with the config that instance runs", quote.Value(ifc.name), advise(err), c.viewFlag())
	case errors.Is(err, bpf.ErrObserveNeedsSysAdmin):
		ifc.err = fmt.Errorf("interface %s: read the counters of the running instance: %w: run %s as root (sudo)", quote.Value(ifc.name), err, c.viewFlag())
	case err != nil:
		ifc.err = fmt.Errorf("interface %s: read the counters of the running instance: %w", quote.Value(ifc.name), err)
	}
	if err != nil {
		return true, ifc.err
	}
	ifc.prog, ifc.ifindex, ifc.err, ifc.reported = prog, ifindex, nil, ""
	owners := at.Owners
	ifc.observer, ifc.attachment = observer(owners), at
	holders := "no running process is seen holding its link (kept by keep_attached, or attached through netlink)"
	if len(owners) > 0 {
		names := make([]string, len(owners))
		for i, h := range owners {
			names[i] = h.String()
		}
		holders = "attached by process " + strings.Join(names, ", ")
	}
	c.log.Infof("interface %s: read-only: counters of program id %d, %s, read from the attached program; nothing is attached, detached or changed",
		quote.Value(ifc.name), prog.ID(), holders)
	return true, nil
}

// observer names, briefly, the instance whose program is observed: by the
// processes that hold its link.
func observer(owners []bpf.Owner) string {
	if len(owners) == 0 {
		return "a kept link"
	}
	pids := make([]string, len(owners))
	for i, h := range owners {
		pids[i] = strconv.Itoa(h.PID)
	}
	return "the instance of pid " + strings.Join(pids, ", ")
}
