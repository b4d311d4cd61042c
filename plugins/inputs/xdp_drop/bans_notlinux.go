//go:build !linux

package xdp_drop

import "github.com/influxdata/telegraf"

// bans needs the kernel's ban table: Start fails without Linux first; its
// settings are kept for -check's plan.
type bans struct {
	feed any
	set  *bansSettings
}

func newBans(set *bansSettings, _ telegraf.Logger) (*bans, error) { return &bans{set: set}, nil }

func (b *bans) windows() windows { return nil }
