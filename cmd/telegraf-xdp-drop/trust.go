package main

import (
	"fmt"
	"io/fs"
	"os/user"
	"strconv"
)

// untrustedError is a refusal by the config trust check (see openTrusted),
// as opposed to a failure to read the file.
type untrustedError struct{ msg string }

func (e *untrustedError) Error() string { return e.msg }

func writers(bits fs.FileMode) string {
	switch {
	case bits&0o020 != 0 && bits&0o002 != 0:
		return "its group and all users"
	case bits&0o020 != 0:
		return "its group"
	default:
		return "all users"
	}
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return fmt.Sprintf("uid %s (%s)", id, u.Username)
	}
	return "uid " + id
}
