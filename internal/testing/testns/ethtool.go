//go:build linux

package testns

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolSGRO is ETHTOOL_SGRO from linux/ethtool.h.
const ethtoolSGRO = 0x0000002c

// ifreqData is struct ifreq carrying a pointer, as SIOCETHTOOL takes it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// EnableGRO turns GRO on for ifname. A veth whose peer transmits with XDP_TX
// only accepts the frames when it runs NAPI: with a native XDP program, or
// with GRO on (which generic-mode tests need, and tests that must see what
// reaches an interface while it has no XDP program).
func (n *NS) EnableGRO(ifname string) error {
	return n.Do(func() error { return EnableGROHere(ifname) })
}

// EnableGROHere turns GRO on for ifname in the calling thread's network
// namespace, for programs that run inside a test namespace already.
func EnableGROHere(ifname string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: ethtoolSGRO, data: 1}
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	ifr.data = unsafe.Pointer(&v)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return fmt.Errorf("enable GRO on %s: %w", ifname, errno)
	}
	return nil
}
