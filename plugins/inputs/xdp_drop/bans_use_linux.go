//go:build linux

package xdp_drop

import (
	"fmt"

	"github.com/influxdata/telegraf"

	"github.com/xdp-drop/xdp_drop/internal/bans"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// useBans gives the bans the ban table the programs attached now run on,
// once the allowed prefixes' files changed are read again and put in force.
func (x *XDPDrop) useBans(acc telegraf.Accumulator) {
	if x.bans == nil {
		return
	}
	table, ok, err := x.links.banTable()
	if !ok {
		return
	}
	if err == nil {
		x.banOpts.refreshAllow(acc, x.Log, x.bans)
	}
	x.bans.Use(acc, table, err)
}

// refreshAllow puts the allowed prefixes in force again when a file of
// them changed; a file that fails keeps its last good prefixes, and its
// error is reported once.
func (s *bansSettings) refreshAllow(acc telegraf.Accumulator, log telegraf.Logger, b *bans.Bans) {
	changed, err := s.allow.refresh()
	switch {
	case err != nil && err.Error() != s.allowReported:
		s.allowReported = err.Error()
		acc.AddError(fmt.Errorf("bans: %w; the allowed prefixes read before stay in force", err))
	case err == nil && s.allowReported != "":
		s.allowReported = ""
		log.Infof("bans: allow_prefix_file reads again")
	}
	if !changed {
		return
	}
	allow, err := s.allow.union()
	if err != nil {
		acc.AddError(fmt.Errorf("bans: set the allowed prefixes: %w", err))
		return
	}
	if b.Allow(acc, allow) {
		log.Infof("bans: allowed prefixes changed: %s in force", quote.Thousands(uint64(s.allow.count())))
	}
}
