package reconcile

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// lineReader splits an NDJSON stream into lines of any length, one line at
// a time through a bufio.Reader. It keeps at most max bytes of a line and
// reports the full length. It is how the pass read its input before it read
// blocks (splitter): the reference the splitter is held to.
type lineReader struct {
	r    *bufio.Reader
	buf  []byte
	max  int
	size int  // full length of the current line
	cut  bool // whether the current line was cut at max
	// started is set once the first line was read (and a byte-order mark
	// before it skipped).
	started bool
}

func newLineReader(r io.Reader, max int) *lineReader {
	return newLineReaderSize(r, max, 64<<10)
}

// newLineReaderSize is newLineReader reading through a buffer of bufSize
// bytes.
func newLineReaderSize(r io.Reader, max, bufSize int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, bufSize), max: max}
}

// next returns the next line without its line ending ("\n" or "\r\n"), the
// line's full length in bytes, and whether the line was cut at max bytes.
// It returns io.EOF once no bytes are left. The returned slice is valid
// until the next call.
func (l *lineReader) next() (line []byte, size int, cut bool, err error) {
	buf, size, cut, err := l.appendNext(l.buf[:0])
	if err != nil {
		return nil, 0, false, err
	}
	l.buf = buf
	return buf, size, cut, nil
}

// appendNext is next appending the line to dst (at most max bytes of it)
// and returning the extended dst; on an error dst is returned unchanged.
func (l *lineReader) appendNext(dst []byte) (out []byte, size int, cut bool, err error) {
	if !l.started {
		l.started = true
		if head, _ := l.r.Peek(len(bom)); bytes.Equal(head, bom) {
			_, _ = l.r.Discard(len(bom))
		}
	}
	start, buf := len(dst), dst
	l.size, l.cut = 0, false
	read := 0
	// heldCR is a '\r' that ended the previous chunk: part of the line
	// unless the next chunk is the '\n' that ends it.
	heldCR := false
	for {
		chunk, err := l.r.ReadSlice('\n')
		read += len(chunk)
		ended := err == nil
		data := chunk
		if ended {
			data = chunk[:len(chunk)-1]
		}
		if heldCR {
			heldCR = false
			if ended && len(data) == 0 {
				return buf, l.size, l.cut, nil
			}
			buf = l.add(buf, start, []byte{'\r'})
		}
		if n := len(data); n > 0 && data[n-1] == '\r' {
			data = data[:n-1]
			heldCR = !ended
		}
		buf = l.add(buf, start, data)
		switch {
		case ended:
			return buf, l.size, l.cut, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if read == 0 {
				return dst, 0, false, io.EOF
			}
			// A '\r' at the very end is taken as the line ending.
			return buf, l.size, l.cut, nil
		default:
			return dst, 0, false, err
		}
	}
}

// add appends data to the line that starts at buf[start], keeping at most
// max bytes of it, and returns the extended buf.
func (l *lineReader) add(buf []byte, start int, data []byte) []byte {
	l.size += len(data)
	room := l.max - (len(buf) - start)
	keep := min(max(room, 0), len(data))
	l.cut = l.cut || keep < len(data)
	return append(buf, data[:keep]...)
}
