package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// checkConfigTrust refuses a config file that a user other than root and
// the one running the binary could change, along with every directory
// above it: with the binary's capabilities, whoever writes the config
// decides which interfaces drop traffic. Root needs no such check (it could
// attach anything anyway); uid is the real user running the binary.
func checkConfigTrust(path string, uid int) error {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	resolved, err = filepath.Abs(resolved)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for p := resolved; ; p = filepath.Dir(p) {
		if err := checkTrusted(p, uid); err != nil {
			return err
		}
		if p == "/" {
			return nil
		}
	}
}

// checkTrusted checks one path: owned by root or uid, and writable by
// nobody else (a directory with the sticky bit, such as /tmp, lets others
// add files but not replace ours).
func checkTrusted(p string, uid int) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("config: stat %s: no owner information", p)
	}
	if st.Uid != 0 && int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by %s, who could then choose which interfaces drop traffic; "+
			"make it root's: chown root %s (or run as that user)", p, userName(st.Uid), p)
	}
	writable := fi.Mode().Perm() & 0o022
	if fi.IsDir() && fi.Mode()&fs.ModeSticky != 0 {
		writable = 0
	}
	if writable != 0 {
		return fmt.Errorf("%s is writable by %s (mode %04o), who could then choose which interfaces drop traffic; "+
			"run: chmod go-w %s", p, writers(writable), fi.Mode().Perm(), p)
	}
	return nil
}

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
