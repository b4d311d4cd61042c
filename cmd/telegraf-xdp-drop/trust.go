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
// attach anything anyway); uid is the real user running the binary. A
// symbolic link on the way counts too: whoever may replace it chooses the
// file read.
func checkConfigTrust(path string, uid int) error {
	if err := checkLinksTrust(path, uid); err != nil {
		return err
	}
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

// checkLinksTrust follows path link by link and checks each symbolic link
// met as the file's name, and the directories that hold it: owned by root
// or uid and writable by nobody else.
func checkLinksTrust(path string, uid int) error {
	p, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for range 40 { // the kernel's limit on links followed
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return nil // the resolved file is checked next
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && st.Uid != 0 && int(st.Uid) != uid {
			return fmt.Errorf("%s is a symbolic link owned by %s, who could then choose which file is read as the config; "+
				"pass the file's own path, or make the link root's", p, userName(st.Uid))
		}
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			if err := checkTrusted(d, uid); err != nil {
				return fmt.Errorf("%w (it holds the symbolic link %s)", err, p)
			}
			if d == "/" {
				break
			}
		}
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
	}
	return fmt.Errorf("config: %s: too many levels of symbolic links", path)
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
