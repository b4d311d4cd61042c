package xdp_drop

import "github.com/influxdata/telegraf"

// console is the console view's side of the interfaces (-watch, -status):
// with on, an interface another running xdp_drop holds is read from its
// attached program (observe, observe_linux.go) instead of failing to attach;
// with readOnly, nothing is attached at all.
type console struct {
	on       bool
	readOnly bool
	log      telegraf.Logger
}

// viewFlag is the flag of the read-only run, for its messages.
func (c console) viewFlag() string {
	if c.readOnly {
		return "-status"
	}
	return "-watch"
}
