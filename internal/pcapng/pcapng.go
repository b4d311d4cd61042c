// Package pcapng writes frames to a pcapng file that rotates at a size:
// when the next block would take the file past it, the file becomes
// <path>.1, the rotated files before it move up by one (<path>.1 to
// <path>.2 ...), the oldest past the number kept is replaced, and a new
// file starts. A capture found at the path is continued.
package pcapng

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006

	byteOrderMagic = 0x1A2B3C4D

	linkEthernet = 1
	optEnd       = 0
	optIfName    = 2
	optTSResol   = 9
)

// MinSize is the smallest size a file may rotate at: room for its headers
// and a few frames of the largest snap length.
const MinSize = 64 << 10

// MaxFiles bounds the rotated files kept.
const MaxFiles = 100

// Options says how a capture is written and rotated.
type Options struct {
	MaxSize int64  // a file rotates before a block would take it past this
	Snaplen uint32 // frames are cut to this many bytes
	Files   int    // rotated files kept, <path>.1 (the newest) to <path>.<Files>
}

// Writer writes Ethernet frames to a rotating pcapng file. It is not safe
// for concurrent use. A write that fails leaves the file as it was before
// it, ending on a whole block, and a rotation that fails leaves the file
// open: the next write tries again.
type Writer struct {
	path    string
	dir     *os.File // the capture's directory, checked once; files are opened in it
	name    string   // the file's name in dir
	opts    Options
	f       *os.File          // nil after a rotation that moved the file but could not create the next
	size    int64             // the end of the last whole block
	cut     bool              // a failed write left bytes past size: cut them before the next
	started bool              // this writer's section header is in the file
	ids     map[string]uint32 // interface name: its id in the current section
	nextID  uint32            // the id of the next interface declared
	buf     []byte
}

// Open starts writing the capture at path (mode 0600, this user's), or
// continues the one there, after its last whole block, in its last section
// (rather than a new one, whose interfaces tshark 4.0 names after the first
// section's). A file there that is not a pcapng file is rotated first. Files are created
// new (never opened through a symbolic link, never one of another user's)
// in the directory as it was checked at Open, and locked while written, so
// that two writers never mix their blocks.
func Open(path string, o Options) (*Writer, error) {
	if o.MaxSize < MinSize {
		return nil, fmt.Errorf("capture size %d is below the least, %d", o.MaxSize, MinSize)
	}
	if o.Files < 1 || o.Files > MaxFiles {
		return nil, fmt.Errorf("%d rotated capture files is out of range, 1 to %d", o.Files, MaxFiles)
	}
	dir, name, err := openDir(path)
	if err != nil {
		return nil, err
	}
	w := &Writer{path: path, dir: dir, name: name, opts: o}
	if err := w.resume(); err != nil {
		dir.Close()
		return nil, err
	}
	return w, nil
}

// continueAt takes f, locked, as the current file: a new one, or one
// continued after the last whole block of the section found in it.
func (w *Writer) continueAt(f *os.File, sec section) {
	if sec.ids == nil {
		sec.ids = map[string]uint32{}
	}
	w.f, w.size, w.cut, w.started = f, sec.end, false, sec.end > 0
	w.ids, w.nextID = sec.ids, sec.nextID
}

// rotate moves the current file to <path>.1, after the rotated files, and
// starts a new one. When the move fails the file stays the current one.
func (w *Writer) rotate() error {
	if err := w.moveFiles(); err != nil {
		return fmt.Errorf("rotate capture file: %w", err)
	}
	old := w.f
	w.f = nil
	old.Close()
	return w.create()
}

// write appends whole blocks; when that fails, the file is cut back to
// where it was, so that it never holds part of a block.
func (w *Writer) write(b []byte) error {
	if _, err := w.f.WriteAt(b, w.size); err != nil {
		w.cut = true
		if cerr := w.cutBack(); cerr != nil {
			return fmt.Errorf("write capture file: %w; %w", err, cerr)
		}
		return fmt.Errorf("write capture file: %w", err)
	}
	w.size += int64(len(b))
	return nil
}

// cutBack truncates the file to its last whole block.
func (w *Writer) cutBack() error {
	if err := w.f.Truncate(w.size); err != nil {
		return fmt.Errorf("cut the capture file back to its last whole block: %w", err)
	}
	w.cut = false
	return nil
}

// WritePacket writes the first bytes of a frame (data, cut to the snap
// length) received on iface at ts, whose whole length was origLen. When it
// fails, the frame is not in the capture and the file is as it was.
func (w *Writer) WritePacket(iface string, ts time.Time, data []byte, origLen int) error {
	if w.dir == nil {
		return errors.New("capture is closed")
	}
	if w.f == nil {
		if err := w.create(); err != nil {
			return err
		}
	}
	if w.cut {
		if err := w.cutBack(); err != nil {
			return err
		}
	}
	if uint32(len(data)) > w.opts.Snaplen {
		data = data[:w.opts.Snaplen]
	}
	for try := 0; try < 2; try++ {
		w.buf = w.buf[:0]
		if !w.started {
			w.buf = appendSHB(w.buf)
		}
		id, known := w.ids[iface]
		if !known {
			id = w.nextID
			w.buf = appendIDB(w.buf, iface, w.opts.Snaplen)
		}
		w.buf = appendEPB(w.buf, id, ts, data, origLen)
		if w.size+int64(len(w.buf)) > w.opts.MaxSize {
			if w.size == 0 {
				break
			}
			if err := w.rotate(); err != nil {
				return err
			}
			continue
		}
		if err := w.write(w.buf); err != nil {
			return err
		}
		w.started = true
		if !known {
			w.ids[iface] = id
			w.nextID++
		}
		return nil
	}
	return fmt.Errorf("a frame does not fit in a capture file of %d bytes", w.opts.MaxSize)
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

// section is what a capture found at the path ends with: where its last
// whole block ends, and the interfaces its last section declared.
type section struct {
	end    int64
	ids    map[string]uint32 // Ethernet interfaces of the writer's snap length
	nextID uint32            // interfaces declared in the section
}

// readCapture walks the blocks of a capture of size bytes up to the first
// one cut short or not holding together (a crash while writing), and
// returns false when it is not a little-endian pcapng file. It reads the
// whole file once, at most the rotation size: that is what knowing the
// interfaces of the section to continue takes.
func readCapture(r io.ReaderAt, size int64, snaplen uint32) (section, bool, error) {
	sec := section{ids: map[string]uint32{}}
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10)
	var h [8]byte
	var body []byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return sec, sec.end > 0 || size == 0, eofIsEnd(err)
		}
		typ, n := le.Uint32(h[0:]), int64(le.Uint32(h[4:]))
		if sec.end == 0 && typ != blockSHB {
			return sec, false, nil
		}
		if n < 12 || n%4 != 0 || sec.end+n > size {
			return sec, sec.end > 0, nil
		}
		// Only the headers of sections and interfaces are read; frames are skipped.
		body = body[:0]
		var err error
		if typ == blockSHB || typ == blockIDB {
			body = append(body, make([]byte, n-12)...)
			_, err = io.ReadFull(br, body)
		} else {
			_, err = br.Discard(int(n - 12))
		}
		if err == nil {
			_, err = io.ReadFull(br, h[:4])
		}
		if err != nil {
			return sec, sec.end > 0, eofIsEnd(err)
		}
		if int64(le.Uint32(h[:4])) != n {
			return sec, sec.end > 0, nil
		}
		switch typ {
		case blockSHB:
			if len(body) < 4 || le.Uint32(body) != byteOrderMagic {
				return sec, sec.end > 0, nil
			}
			clear(sec.ids)
			sec.nextID = 0
		case blockIDB:
			if name, ok := ethernetIDB(body, snaplen); ok {
				sec.ids[name] = sec.nextID
			}
			sec.nextID++
		}
		sec.end += n
	}
}

// ethernetIDB returns the interface name of an Ethernet interface block
// body of snap length snaplen, as this writer declares them.
func ethernetIDB(body []byte, snaplen uint32) (string, bool) {
	if len(body) < 8 || le.Uint16(body) != linkEthernet || le.Uint32(body[4:]) != snaplen {
		return "", false
	}
	for opts := body[8:]; len(opts) >= 4; {
		code, n := le.Uint16(opts), int(le.Uint16(opts[2:]))
		if code == optEnd || 4+n > len(opts) {
			break
		}
		if code == optIfName {
			return string(opts[4 : 4+n]), true
		}
		opts = opts[4+n+pad4(n):]
	}
	return "", false
}

func eofIsEnd(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
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

func appendSHB(dst []byte) []byte {
	var body []byte
	body = le.AppendUint32(body, byteOrderMagic)
	body = le.AppendUint16(body, 1)
	body = le.AppendUint16(body, 0)
	body = le.AppendUint64(body, ^uint64(0)) // section length unknown
	return block(dst, blockSHB, body)
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
