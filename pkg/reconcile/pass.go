package reconcile

import (
	"io"
)

// The pipeline of Count: one goroutine reads the input in blocks straight
// into chunks of whole lines, workers work out the verdicts of whole
// chunks, and the caller applies the chunks in the order they were read,
// each once its verdicts are done.
const (
	// chunkBytes is the block read into a chunk at a time. 128 KB rather
	// than 256: the chunks in flight and their verdicts take half the
	// fresh pages (~550 page faults fewer over 200,000 records, and page
	// faults are dear in a virtual machine), with as few hand-offs per
	// core as make no difference.
	chunkBytes = 128 << 10
	// maxKeptChunk is the largest chunk buffer kept for reuse (a chunk
	// that held a huge line is dropped).
	maxKeptChunk = 4 << 20
)

// chunk is a run of consecutive non-blank lines of the input.
type chunk struct {
	data  []byte // the lines as read (what the pass keeps of each)
	lines []lineSpan
	// verdicts are the verdicts on lines, in order, once done is closed.
	verdicts []judgedRecord
	ids      []byte
	// idBlock holds the event ids of the valid records, back to back.
	idBlock string
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
		blk, err := b.claims.addBlock(ch.idBlock)
		if err != nil {
			return err
		}
		b.block = blk
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
	lines := newSplitter(r, maxLine, chunkBytes)
	for {
		var ch *chunk
		select {
		case ch = <-free:
		default:
			ch = &chunk{data: make([]byte, 0, chunkBytes)}
		}
		ch.done = make(chan struct{})
		if !lines.fill(ch) {
			return
		}
		select {
		case order <- ch:
		case <-quit:
			return
		}
		select {
		case work <- ch:
		case <-quit:
			return
		}
		if ch.err != nil {
			return
		}
	}
}
