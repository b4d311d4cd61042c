// Package pcapng writes frames to a pcapng file that rotates at a size:
// when the next block would take the file past it, the file becomes
// <path>.1 (replacing the one before) and a new one starts, so the two
// together never hold more than twice the size and neither more than it.
package pcapng

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
)

const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006

	linkEthernet = 1
	optEnd       = 0
	optIfName    = 2
	optTSResol   = 9
)

// MinSize is the smallest size a file may rotate at: room for its headers
// and a few frames of the largest snap length.
const MinSize = 64 << 10

// Writer writes Ethernet frames to a rotating pcapng file. It is not safe
// for concurrent use.
type Writer struct {
	path    string
	dir     *os.File // the capture's directory, checked once; files are opened in it
	name    string   // the file's name in dir
	max     int64
	snaplen uint32
	f       *os.File
	size    int64
	ids     map[string]uint32 // interface name: its id in the current file
	buf     []byte
}

// Create starts a capture at path (mode 0600), rotating at maxSize bytes.
// A capture already there, not empty, becomes <path>.1 first. Files are
// created new (never opened through a symbolic link, never one put there
// by someone else) in the directory as it was checked at Create.
func Create(path string, maxSize int64, snaplen uint32) (*Writer, error) {
	if maxSize < MinSize {
		return nil, fmt.Errorf("capture size %d is below the least, %d", maxSize, MinSize)
	}
	dir, name, err := openDir(path)
	if err != nil {
		return nil, err
	}
	w := &Writer{path: path, dir: dir, name: name, max: maxSize, snaplen: snaplen}
	if err := w.start(); err != nil {
		dir.Close()
		return nil, err
	}
	return w, nil
}

// open creates the file, new, and writes its section header.
func (w *Writer) open() error {
	f, err := w.createFile()
	if err != nil {
		return fmt.Errorf("create capture file: %w", err)
	}
	w.f, w.size, w.ids = f, 0, map[string]uint32{}
	return w.write(shb())
}

// rotate moves the current file to <path>.1 and starts a new one.
func (w *Writer) rotate() error {
	if w.f == nil {
		return errors.New("capture file is closed")
	}
	err := w.moveCurrent()
	w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("rotate capture file: %w", err)
	}
	return w.open()
}

func (w *Writer) write(b []byte) error {
	n, err := w.f.Write(b)
	w.size += int64(n)
	if err != nil {
		return fmt.Errorf("write capture file: %w", err)
	}
	return nil
}

// WritePacket writes the first bytes of a frame (data, cut to the snap
// length) received on iface at ts, whose whole length was origLen.
func (w *Writer) WritePacket(iface string, ts time.Time, data []byte, origLen int) error {
	if w.f == nil {
		return errors.New("capture file is closed")
	}
	if uint32(len(data)) > w.snaplen {
		data = data[:w.snaplen]
	}
	for try := 0; try < 2; try++ {
		w.buf = w.buf[:0]
		id, known := w.ids[iface]
		if !known {
			id = uint32(len(w.ids))
			w.buf = appendIDB(w.buf, iface, w.snaplen)
		}
		w.buf = appendEPB(w.buf, id, ts, data, origLen)
		if w.size+int64(len(w.buf)) > w.max {
			if err := w.rotate(); err != nil {
				return err
			}
			continue
		}
		if err := w.write(w.buf); err != nil {
			return err
		}
		w.ids[iface] = id
		return nil
	}
	return fmt.Errorf("a frame does not fit in a capture file of %d bytes", w.max)
}

// Close closes the file.
func (w *Writer) Close() error {
	if w.dir != nil {
		w.dir.Close()
		w.dir = nil
	}
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

var le = binary.LittleEndian

// block wraps a block body with its type and lengths.
func block(dst []byte, typ uint32, body []byte) []byte {
	total := uint32(12 + len(body))
	dst = le.AppendUint32(dst, typ)
	dst = le.AppendUint32(dst, total)
	dst = append(dst, body...)
	return le.AppendUint32(dst, total)
}

func shb() []byte {
	var body []byte
	body = le.AppendUint32(body, 0x1A2B3C4D)
	body = le.AppendUint16(body, 1)
	body = le.AppendUint16(body, 0)
	body = le.AppendUint64(body, ^uint64(0)) // section length unknown
	return block(nil, blockSHB, body)
}

func appendOpt(dst []byte, code uint16, v []byte) []byte {
	dst = le.AppendUint16(dst, code)
	dst = le.AppendUint16(dst, uint16(len(v)))
	dst = append(dst, v...)
	return append(dst, make([]byte, pad4(len(v)))...)
}

func pad4(n int) int { return (4 - n%4) % 4 }

func appendIDB(dst []byte, iface string, snaplen uint32) []byte {
	var body []byte
	body = le.AppendUint16(body, linkEthernet)
	body = le.AppendUint16(body, 0)
	body = le.AppendUint32(body, snaplen)
	body = appendOpt(body, optIfName, []byte(iface))
	body = appendOpt(body, optTSResol, []byte{9}) // nanoseconds
	body = appendOpt(body, optEnd, nil)
	return block(dst, blockIDB, body)
}

func appendEPB(dst []byte, id uint32, ts time.Time, data []byte, origLen int) []byte {
	ns := uint64(ts.UnixNano())
	total := uint32(32 + len(data) + pad4(len(data)))
	dst = le.AppendUint32(dst, blockEPB)
	dst = le.AppendUint32(dst, total)
	dst = le.AppendUint32(dst, id)
	dst = le.AppendUint32(dst, uint32(ns>>32))
	dst = le.AppendUint32(dst, uint32(ns))
	dst = le.AppendUint32(dst, uint32(len(data)))
	dst = le.AppendUint32(dst, uint32(origLen))
	dst = append(dst, data...)
	dst = append(dst, make([]byte, pad4(len(data)))...)
	dst = le.AppendUint32(dst, total)
	return dst
}
