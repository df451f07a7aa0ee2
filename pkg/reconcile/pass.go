package reconcile

import (
	"bytes"
	"fmt"
	"io"
)

// The pipeline of Count: one goroutine reads lines into chunks, workers
// work out the verdicts of whole chunks, and the caller applies the chunks
// in the order they were read, each once its verdicts are done.
const (
	// chunkLines and chunkBytes end a chunk, whichever comes first.
	chunkLines = 512
	chunkBytes = 256 << 10
	// readBuffer is the size of the reads from the input.
	readBuffer = 1 << 20
	// maxKeptChunk is the largest chunk buffer kept for reuse (a chunk
	// that held a huge line is dropped).
	maxKeptChunk = 4 << 20
)

// chunk is a run of consecutive non-blank lines of the input.
type chunk struct {
	data  []byte // the lines, back to back (what the pass keeps of each)
	lines []lineSpan
	// verdicts are the verdicts on lines, in order, once done is closed.
	verdicts []verdict
	ids      []byte
	// err is a read error met after the chunk's lines.
	err  error
	done chan struct{}
}

// lineSpan is one line of a chunk.
type lineSpan struct {
	n          int // line number, 1-based
	start, end int // in chunk.data
	size       int // the full length of the line
	cut        bool
}

// countLines is the pass of Count over r, its verdicts worked out on
// workers goroutines and applied in line order.
func (b *Batch) countLines(r io.Reader, maxLine, workers int) error {
	workers = max(workers, 1)
	inflight := 2*workers + 2
	order := make(chan *chunk, inflight) // chunks in read order, for apply
	work := make(chan *chunk, inflight)  // the same chunks, for the workers
	free := make(chan *chunk, 2*inflight+2)
	quit := make(chan struct{})
	defer close(quit)

	go readChunks(r, maxLine, order, work, free, quit)
	for range workers {
		j := b.newJudge(maxLine)
		go func() {
			for {
				select {
				case ch, ok := <-work:
					if !ok {
						return
					}
					j.chunk(ch, b.ingestedAt)
					close(ch.done)
				case <-quit:
					return
				}
			}
		}()
	}
	for ch := range order {
		<-ch.done
		b.claims.touch(ch.verdicts)
		for i := range ch.verdicts {
			if err := b.apply(&ch.verdicts[i]); err != nil {
				return err
			}
		}
		if ch.err != nil {
			return ch.err
		}
		if cap(ch.data) <= maxKeptChunk {
			select {
			case free <- ch:
			default:
			}
		}
	}
	return nil
}

// readChunks reads r into chunks and sends each to order and work, until
// the end of r, a read error (sent in the last chunk) or quit.
func readChunks(r io.Reader, maxLine int, order, work, free chan *chunk, quit chan struct{}) {
	defer close(order)
	defer close(work)
	get := func() *chunk {
		select {
		case ch := <-free:
			ch.data, ch.lines, ch.err = ch.data[:0], ch.lines[:0], nil
			ch.done = make(chan struct{})
			return ch
		default:
			return &chunk{
				data:  make([]byte, 0, chunkBytes+chunkBytes/4),
				lines: make([]lineSpan, 0, chunkLines),
				done:  make(chan struct{}),
			}
		}
	}
	send := func(ch *chunk) bool {
		select {
		case order <- ch:
		case <-quit:
			return false
		}
		select {
		case work <- ch:
			return true
		case <-quit:
			return false
		}
	}
	lines := newLineReaderSize(r, maxLine, readBuffer)
	ch := get()
	for n := 1; ; n++ {
		start := len(ch.data)
		data, size, cut, err := lines.appendNext(ch.data)
		if err == io.EOF {
			break
		}
		if err != nil {
			ch.err = fmt.Errorf("reconcile: read line %d: %w", n, err)
			break
		}
		if !cut && len(bytes.TrimSpace(data[start:])) == 0 {
			ch.data = data[:start]
			continue
		}
		ch.data = data
		ch.lines = append(ch.lines, lineSpan{n: n, start: start, end: len(data), size: size, cut: cut})
		if len(ch.lines) >= chunkLines || len(ch.data) >= chunkBytes {
			if !send(ch) {
				return
			}
			ch = get()
		}
	}
	send(ch)
}
