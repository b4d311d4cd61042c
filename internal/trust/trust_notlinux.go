//go:build !linux

package trust

import (
	"errors"
	"os"
)

// Open needs Linux: the walk opens each name relative to the last.
func Open(_ string, _ int, what string) (*os.File, error) {
	return nil, errors.New(what + ": the trust check needs Linux")
}
