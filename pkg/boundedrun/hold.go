package boundedrun

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// holdEvery is how many lines pass between two looks at the backlog, and
// holdPoll how often a held source looks again.
const (
	holdEvery = 25
	holdPoll  = 10 * time.Millisecond
)

// heldReader hands the file over a line per Read, and before every
// holdEvery-th line waits while the pipeline's consumers have more than
// max messages left: a source that never runs further ahead of the
// pipeline than max, however busy the host is.
type heldReader struct {
	ctx     context.Context
	br      *bufio.Reader
	backlog func(context.Context) (uint64, error)
	max     uint64
	stall   time.Duration
	line    []byte
	lines   int
	err     error
}

func holdBacklog(ctx context.Context, r io.Reader, p *pipeline.Pipeline, max int, stall time.Duration) io.Reader {
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	return &heldReader{ctx: ctx, br: bufio.NewReaderSize(r, 1<<20), max: uint64(max), stall: stall,
		backlog: func(ctx context.Context) (uint64, error) {
			b, _, err := p.Backlog(ctx)
			var n uint64
			for _, v := range b {
				n += v
			}
			return n, err
		}}
}

func (h *heldReader) Read(b []byte) (int, error) {
	if len(h.line) == 0 {
		if h.err != nil {
			return 0, h.err
		}
		if h.lines%holdEvery == 0 {
			if err := h.hold(); err != nil {
				h.err = err
				return 0, err
			}
		}
		h.line, h.err = h.br.ReadBytes('\n')
		h.lines++
		if len(h.line) == 0 {
			return 0, h.err
		}
	}
	n := copy(b, h.line)
	h.line = h.line[n:]
	return n, nil
}

// hold returns once the backlog is at most max. A backlog that does not
// shrink for the stall timeout (negative: no bound) is an error, as in
// the drain.
func (h *heldReader) hold() error {
	var least uint64
	since := time.Now()
	for {
		n, err := h.backlog(h.ctx)
		if err != nil {
			return fmt.Errorf("backlog: %w", err)
		}
		if n <= h.max {
			return nil
		}
		if least == 0 || n < least {
			least, since = n, time.Now()
		} else if h.stall > 0 && time.Since(since) > h.stall {
			return fmt.Errorf("source held for %v: the pipeline's backlog stays at %d, over %d", h.stall, n, h.max)
		}
		if err := stream.Pause(h.ctx, holdPoll); err != nil {
			return err
		}
	}
}
