//go:build !unix

package pcapng

import "errors"

const openFlags = 0

// CheckPath refuses every path: the capture is written on Unix only.
func CheckPath(string) error { return errors.New("cannot be written on this system") }
