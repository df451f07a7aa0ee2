package boundedrun

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// sample records metrics.json points every 200ms until the returned stop
// function is called.
func sample(ctx context.Context, p *pipeline.Pipeline, began time.Time, tr *tracer, out *[]dashboard.Sample) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	take := func() {
		s := dashboard.Sample{T: time.Since(began).Seconds()}
		if b, err := backlogOf(p)(ctx); err == nil {
			s.Backlog = b
		}
		for q := 0; q < p.Config().Partitions; q++ {
			if ck, err := p.Store.Checkpoint(ctx, q); err == nil {
				s.LedgerEntries += ck.Entries
			}
			if n, err := p.Redis.ZCard(ctx, p.Store.Keys().Index(q)).Result(); err == nil {
				s.Windows += n
			}
		}
		s.RedisBytes = redisUsedMemory(ctx, p)
		tr.mu.Lock()
		s.Corrections, s.Late = tr.corrections, tr.late
		tr.mu.Unlock()
		*out = append(*out, s)
	}
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				take()
			}
		}
	}()
	return func() {
		cancel()
		<-done
		take()
	}
}

func redisUsedMemory(ctx context.Context, p *pipeline.Pipeline) int64 {
	info, err := p.Redis.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// progress prints a line per second to w until stopped.
func progress(ctx context.Context, p *pipeline.Pipeline, w io.Writer, began time.Time, tr *tracer) (stop func()) {
	if w == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				var backlog uint64
				b, _, _ := p.Backlog(ctx)
				for _, v := range b {
					backlog += v
				}
				raw, _ := p.Admin.JS.Stream(ctx, wire.Raw)
				var stored uint64
				if raw != nil {
					if info, err := raw.Info(ctx); err == nil {
						stored = info.State.Msgs
					}
				}
				tr.mu.Lock()
				applied := len(tr.rows)
				tr.mu.Unlock()
				fmt.Fprintf(w, "run: %5.1fs raw=%d applied=%d backlog=%d crashes=%v\n",
					time.Since(began).Seconds(), stored, applied, backlog, p.Crashes())
			}
		}
	}()
	return func() { cancel(); <-done }
}
