package boundedrun

import (
	"context"
	"fmt"
	"time"

	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/stream"
)

// holdEvery is how many lines pass between two looks at the backlog, and
// holdPoll how often a held source looks again.
const (
	holdEvery = 25
	holdPoll  = 10 * time.Millisecond
)

// holdBacklog is an ingest.Pace that, before every holdEvery-th line,
// waits while backlog is over max, then paces by then (nil: not): a
// source that never runs further ahead of the pipeline than max, however
// busy the host is. A backlog that does not shrink for stall (0:
// DefaultStallTimeout; negative: no bound) is an error, as in the drain.
func holdBacklog(backlog func(context.Context) (uint64, error), max uint64, stall time.Duration, then ingest.Pace) ingest.Pace {
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	return func(ctx context.Context, n int) error {
		if n%holdEvery == 0 {
			if err := hold(ctx, backlog, max, stall); err != nil {
				return err
			}
		}
		if then == nil {
			return nil
		}
		return then(ctx, n)
	}
}

// hold returns once backlog is at most max (see holdBacklog).
func hold(ctx context.Context, backlog func(context.Context) (uint64, error), max uint64, stall time.Duration) error {
	var least uint64
	since := time.Now()
	for {
		b, err := backlog(ctx)
		if err != nil {
			return fmt.Errorf("backlog: %w", err)
		}
		if b <= max {
			return nil
		}
		if least == 0 || b < least {
			least, since = b, time.Now()
		} else if stall > 0 && time.Since(since) > stall {
			return fmt.Errorf("source held for %v: the pipeline's backlog stays at %d, over %d", stall, b, max)
		}
		if err := stream.Pause(ctx, holdPoll); err != nil {
			return err
		}
	}
}

// backlogOf is p's backlog, every consumer's summed.
func backlogOf(p *pipeline.Pipeline) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		b, _, err := p.Backlog(ctx)
		var n uint64
		for _, v := range b {
			n += v
		}
		return n, err
	}
}
