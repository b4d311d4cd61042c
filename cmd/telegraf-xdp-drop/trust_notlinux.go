//go:build !linux

package main

import (
	"errors"
	"os"
)

func raisedCapabilities() string { return "" }

func openTrusted(string, int) (*os.File, error) {
	return nil, errors.New("config: the trust check needs Linux")
}
