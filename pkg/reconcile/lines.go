package reconcile

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// lineReader splits an NDJSON stream into lines of any length. It keeps at
// most max bytes of a line and reports the full length, so a line of
// gigabytes costs max bytes of memory, never an error.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line ending ("\n" or "\r\n"), the
// line's full length in bytes, and whether the line was cut at max bytes.
// It returns io.EOF once no bytes are left. The returned slice is valid
// until the next call.
func (l *lineReader) next() (line []byte, size int, cut bool, err error) {
	l.buf = l.buf[:0]
	read := 0
	for {
		chunk, err := l.r.ReadSlice('\n')
		read += len(chunk)
		data := chunk
		if err == nil {
			data = chunk[:len(chunk)-1]
		}
		size += len(data)
		if room := l.max - len(l.buf); room > 0 {
			keep := min(room, len(data))
			l.buf = append(l.buf, data[:keep]...)
			cut = cut || keep < len(data)
		} else if len(data) > 0 {
			cut = true
		}
		switch {
		case err == nil:
			return l.trimCR(size, cut)
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if read == 0 {
				return nil, 0, false, io.EOF
			}
			return l.trimCR(size, cut)
		default:
			return nil, 0, false, err
		}
	}
}

func (l *lineReader) trimCR(size int, cut bool) ([]byte, int, bool, error) {
	if !cut && bytes.HasSuffix(l.buf, []byte{'\r'}) {
		l.buf = l.buf[:len(l.buf)-1]
		size--
	}
	return l.buf, size, cut, nil
}
