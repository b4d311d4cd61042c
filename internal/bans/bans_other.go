//go:build !linux

package bans

// Bans needs the kernel's ban table: off Linux the plugin's Start fails
// before any ban is put in force.
type Bans struct{}

// New makes bans that hold nothing.
func New(Settings, Logger) (*Bans, error) { return &Bans{}, nil }

// Detecting is false: there is no detection without the kernel's table.
func (b *Bans) Detecting() bool { return false }
