package main

import "github.com/xdp-drop/xdp_drop/internal/trust"

// untrustedError is a refusal by the config trust check (see
// trust.OpenRegular, which openConfigFile calls), as opposed to a failure
// to read the file.
type untrustedError = trust.UntrustedError
