package reconcile

import (
	"bytes"
	"fmt"
	"io"
	"slices"
)

// bom is the UTF-8 byte-order mark, skipped at the start of a file
// (docs/spec.md §2), not rejected.
var bom = []byte{0xEF, 0xBB, 0xBF}

// maxEmptyReads is how many reads in a row may return nothing before the
// input is taken as broken (io.ErrNoProgress), as bufio does.
const maxEmptyReads = 100

// splitter reads an NDJSON stream in large blocks, straight into the
// chunks the pass hands to its workers, and cuts them into lines of any
// length: a line ends at "\n" (one "\r" before it, or at the very end, is
// dropped), a byte-order mark at the start is skipped, and of a line
// longer than max only max bytes are kept (its full length is reported),
// so a line of gigabytes costs max bytes of memory, never an error.
type splitter struct {
	r     io.Reader
	max   int
	block int // the bytes read into a chunk at a time
	// line is the number of lines cut so far.
	line int
	// tail is the start of a line read past the end of the last chunk.
	tail []byte
	// err is the error the input ended with (io.EOF at its end).
	err     error
	started bool
	// skip is scratch for reading past the kept part of a long line.
	skip []byte
}

func newSplitter(r io.Reader, max, block int) *splitter {
	return &splitter{r: r, max: max, block: block}
}

// fill puts the next whole lines (about one block, or one longer line) into
// ch; false once the input ended and ch is empty. A read error other than
// io.EOF is set in ch.err, after the lines before it.
func (s *splitter) fill(ch *chunk) bool {
	ch.data, ch.lines, ch.err = ch.data[:0], ch.lines[:0], nil
	if cap(ch.data) < s.block {
		ch.data = make([]byte, 0, s.block)
	}
	ch.data = append(ch.data, s.tail...)
	s.tail = s.tail[:0]
	pos := 0 // where the next line starts in ch.data
	if !s.started {
		s.started = true
		for len(ch.data) < len(bom) && s.err == nil {
			ch.data = s.read(slices.Grow(ch.data, len(bom)))
		}
		if bytes.HasPrefix(ch.data, bom) {
			pos = len(bom)
		}
	}
	for {
		for len(ch.data) < cap(ch.data) && s.err == nil {
			ch.data = s.read(ch.data)
		}
		if last := bytes.LastIndexByte(ch.data[pos:], '\n'); last >= 0 {
			end := pos + last
			for pos <= end {
				nl := pos + bytes.IndexByte(ch.data[pos:end+1], '\n')
				s.add(ch, pos, nl, nl-pos)
				pos = nl + 1
			}
			s.tail = append(s.tail, ch.data[pos:]...)
			ch.data = ch.data[:pos]
			return true
		}
		switch {
		case s.err != nil:
			return s.end(ch, pos)
		case len(ch.data)-pos > s.max+1:
			// No line end within max+1 bytes: the line is cut.
			s.long(ch, pos)
			return true
		default:
			// A line longer than the block: read on into a larger buffer.
			ch.data = append(ch.data, 0)[:len(ch.data)]
		}
	}
}

// read appends to buf what one or more reads of the input return, up to
// cap(buf): at least one byte unless the input ends (s.err set).
func (s *splitter) read(buf []byte) []byte {
	for empty := 0; s.err == nil; {
		n, err := s.r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err != nil:
			s.err = err
		case n > 0:
			return buf
		default:
			if empty++; empty >= maxEmptyReads {
				s.err = io.ErrNoProgress
			}
		}
	}
	return buf
}

// add cuts the line ch.data[start:end], of raw length raw (more than
// end-start when bytes past the kept ones were dropped), into ch: without
// a "\r" before its end, skipped when blank.
func (s *splitter) add(ch *chunk, start, end, raw int) {
	s.line++
	if end > start && ch.data[end-1] == '\r' {
		end--
		raw--
	}
	if raw <= s.max && len(bytes.TrimSpace(ch.data[start:end])) == 0 {
		return
	}
	kept := min(end, start+s.max)
	ch.lines = append(ch.lines, lineSpan{n: s.line, start: start, end: kept, size: raw, cut: raw > s.max})
}

// end handles the end of the input with ch.data[pos:] holding no line end:
// at io.EOF it is the last line, unless empty; after another error it is
// dropped and the error set in ch.
func (s *splitter) end(ch *chunk, pos int) bool {
	if s.err != io.EOF {
		s.fail(ch, pos)
		return true
	}
	if pos < len(ch.data) {
		s.add(ch, pos, len(ch.data), len(ch.data)-pos)
	}
	return len(ch.lines) > 0
}

// fail drops the line starting at ch.data[pos] and sets the read error in
// ch, naming that line.
func (s *splitter) fail(ch *chunk, pos int) {
	ch.err = fmt.Errorf("reconcile: read line %d: %w", s.line+1, s.err)
	ch.data = ch.data[:pos]
}

// long cuts the line starting at ch.data[pos], which has no end within
// max+1 bytes: it keeps max bytes of it and reads past the rest, counting.
func (s *splitter) long(ch *chunk, pos int) {
	raw := len(ch.data) - pos
	lastCR := ch.data[len(ch.data)-1] == '\r'
	ch.data = ch.data[:pos+s.max]
	if s.skip == nil {
		s.skip = make([]byte, 0, s.block)
	}
	buf := s.skip[:0]
	for {
		if nl := bytes.IndexByte(buf, '\n'); nl >= 0 {
			raw += nl
			if nl > 0 {
				lastCR = buf[nl-1] == '\r'
			}
			s.tail = append(s.tail, buf[nl+1:]...)
			break
		}
		raw += len(buf)
		if len(buf) > 0 {
			lastCR = buf[len(buf)-1] == '\r'
		}
		if s.err == io.EOF {
			break
		}
		if s.err != nil {
			s.fail(ch, pos)
			return
		}
		buf = s.read(buf[:0])
	}
	// A "\r" before the line's end (or at the end of the input) is not
	// part of it.
	if lastCR {
		raw--
	}
	s.line++
	ch.lines = append(ch.lines, lineSpan{n: s.line, start: pos, end: pos + s.max, size: raw, cut: true})
}
