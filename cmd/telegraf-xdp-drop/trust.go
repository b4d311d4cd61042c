package main

import (
	"errors"
	"os"

	"github.com/xdp-drop/xdp_drop/internal/trust"
)

// untrustedError is a refusal by the config trust check (see openTrusted),
// as opposed to a failure to read the file.
type untrustedError = trust.UntrustedError

// openTrusted opens the config under the trust check of internal/trust
// (only root and uid may have chosen its contents), read from the checked
// descriptor.
func openTrusted(path string, uid int) (*os.File, error) {
	f, err := trust.Open(path, uid, "config")
	var notRegular *trust.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, notRegularFile(notRegular.Path, notRegular.Mode)
	}
	return f, err
}
