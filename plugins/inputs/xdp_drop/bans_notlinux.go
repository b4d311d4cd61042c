//go:build !linux

package xdp_drop

import "github.com/influxdata/telegraf"

// bans needs the kernel's ban table: Start fails without Linux first.
type bans struct{ feed any }

func newBans(*bansSettings, telegraf.Logger) (*bans, error) { return &bans{}, nil }

func (b *bans) windows() windows { return nil }
