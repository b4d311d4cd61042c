//go:build linux

package xdp_drop

import (
	"os"
	"syscall"
)

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = st.Dev, st.Ino
		s.ctime = st.Ctim.Nano()
	}
	return s
}
