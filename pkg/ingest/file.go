package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/receiptflow/receiptflow/pkg/stream"
)

// bom is the UTF-8 byte-order mark, skipped at the start of a file
// (docs/spec.md §2).
var bom = []byte{0xEF, 0xBB, 0xBF}

// File publishes every line of r, then closes the Ingester. It returns nil
// only when every record is confirmed stored in RAW; otherwise its error
// holds an *UnconfirmedError naming the first record that is not (match it
// with errors.As). A UTF-8 byte-order mark at the start of r is skipped.
// progress, if set, is called about every 10,000 records.
func File(ctx context.Context, in *Ingester, r io.Reader, progress func(Stats)) (Stats, error) {
	return FileAtRate(ctx, in, r, 0, progress)
}

// FileAtRate is File paced to at most rate records per second (0: as fast
// as JetStream takes them).
func FileAtRate(ctx context.Context, in *Ingester, r io.Reader, rate int, progress func(Stats)) (Stats, error) {
	return FilePaced(ctx, in, r, Rate(rate), progress)
}

// Pace is called by FilePaced before it reads line n (from 0), and may
// wait; an error stops the file as a failed read would.
type Pace func(ctx context.Context, n int) error

// Rate is the Pace of at most rate lines per second from the time it is
// called (nil, unpaced, for rate ≤ 0).
func Rate(rate int) Pace {
	if rate <= 0 {
		return nil
	}
	began := time.Now()
	return func(ctx context.Context, n int) error {
		if ahead := time.Duration(n+1)*time.Second/time.Duration(rate) - time.Since(began); ahead > 5*time.Millisecond {
			_ = stream.Pause(ctx, ahead)
		}
		return nil
	}
}

// FilePaced is File with pace (nil: none) called before each line.
//
// Lines are read in a goroutine of their own, so that the end of ctx
// stops the file even while a read waits for input (a quiet pipe, as
// `tail -f | receiptctl ingest` has): that read is left to return by
// itself, its line unread.
func FilePaced(ctx context.Context, in *Ingester, r io.Reader, pace Pace, progress func(Stats)) (Stats, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	if head, _ := br.Peek(len(bom)); bytes.Equal(head, bom) {
		br.Discard(len(bom))
	}
	chunks := make(chan lineChunk, 1)
	done := make(chan struct{})
	defer close(done)
	go readLines(br, chunks, done)
	n := 0
	for {
		var c lineChunk
		select {
		case <-ctx.Done():
			return in.Stats(), closeAfter(ctx, in, ctx.Err())
		case c = <-chunks:
		}
		for _, line := range c.lines {
			if pace != nil {
				if err := pace(ctx, n); err != nil {
					return in.Stats(), closeAfter(ctx, in, fmt.Errorf("ingest: paced: %w", err))
				}
			}
			n++
			if perr := in.Publish(ctx, line); perr != nil {
				return in.Stats(), closeAfter(ctx, in, perr)
			}
			if st := in.Stats(); progress != nil && st.Records%10000 == 0 {
				progress(st)
			}
			if ctx.Err() != nil {
				return in.Stats(), closeAfter(ctx, in, ctx.Err())
			}
		}
		if c.err == io.EOF {
			break
		}
		if c.err != nil {
			return in.Stats(), closeAfter(ctx, in, fmt.Errorf("ingest: read: %w", c.err))
		}
	}
	err := in.Close(ctx)
	return in.Stats(), err
}

// lineChunk is lines read in a row, and the error that ended them (nil:
// more follow).
type lineChunk struct {
	lines [][]byte
	err   error
}

// chunkLines bounds the lines of a chunk.
const chunkLines = 256

// readLines reads br's lines into chunks (what is buffered, up to
// chunkLines a chunk) until a read fails, or done is closed.
func readLines(br *bufio.Reader, chunks chan<- lineChunk, done <-chan struct{}) {
	for {
		var c lineChunk
		for len(c.lines) < chunkLines {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				c.lines = append(c.lines, line)
			}
			if err != nil {
				c.err = err
				break
			}
			if br.Buffered() == 0 {
				break // send what there is before waiting for more
			}
		}
		select {
		case chunks <- c:
		case <-done:
			return
		}
		if c.err != nil {
			return
		}
	}
}

// closeAfter closes in after err stopped the file, and returns err with
// the Ingester's own failure (the first unconfirmed record) when it has
// one that err is not already.
//
// When ctx ended (SIGTERM, Ctrl-C), what was queued is still stored, and
// the source leaves (docs/spec.md §3.1), within the Ingester's RetryFor.
func closeAfter(ctx context.Context, in *Ingester, err error) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), in.opts.RetryFor)
		defer cancel()
	}
	cerr := in.Close(ctx)
	var ue *UnconfirmedError
	if cerr == nil || (errors.As(err, &ue) && errors.Is(cerr, ue)) {
		return err
	}
	return errors.Join(cerr, err)
}
