//go:build !unix

package pcapng

import (
	"errors"
	"os"
)

var errUnsupported = errors.New("cannot be written on this system")

// CheckPath refuses every path: the capture is written on Unix only.
func CheckPath(string) error { return errUnsupported }

func openDir(string) (*os.File, string, error) { return nil, "", errUnsupported }
func (w *Writer) resume() error                { return errUnsupported }
func (w *Writer) create() error                { return errUnsupported }
func (w *Writer) moveFiles() error             { return errUnsupported }
