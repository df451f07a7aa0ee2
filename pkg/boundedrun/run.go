package boundedrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config configures a bounded run (receiptctl run).
type Config struct {
	pipeline.Config
	// Events is the NDJSON file to replay.
	Events string
	// Out is the artifact directory ("" writes none).
	Out string
	// Progress receives one progress line per second (nil: none).
	Progress io.Writer
	// HeartbeatEvery is ingest's heartbeat period in records.
	HeartbeatEvery int
	// AfterDrain, if set, runs once the pipeline has drained, before it
	// stops (e.g. to dump the KV bucket).
	AfterDrain func(ctx context.Context, p *pipeline.Pipeline) error
	// Rate paces ingest to this many records per second (0: unpaced).
	Rate int
	// MaxBacklog, when positive, holds ingest back while the pipeline's
	// consumers have more than this many messages left (pending plus
	// unacknowledged), looking every few lines: a live source the
	// pipeline keeps up with however busy the host, so that state and
	// lag measured during the run do not depend on the host's load.
	MaxBacklog int
	// Now is the ingest time stamped on records without ingested_at, and
	// given to the batch pass for the same records (default: start time).
	Now time.Time
	// StallTimeout bounds the wait for the drain: when no consumer of a
	// stage with work left acknowledges anything new for this long, Run
	// stops with a *StuckError naming the stuck stage. Zero means
	// DefaultStallTimeout; negative waits until ctx ends.
	StallTimeout time.Duration
}

// Result is what a bounded run produced.
type Result struct {
	Windows  []wire.Window
	Late     []reconcile.LateRow
	Rejected []reconcile.RejectedRow
	Trace    []TraceRow
	Metrics  []dashboard.Sample
	Report   *reconcile.Report
	Ingest   ingest.Stats
	Crashes  map[string]int
	Elapsed  time.Duration
}

// Run replays rc.Events through a pipeline until it drains, then runs the
// batch pass over the RAW stream the pipeline read (reconcile.CountRaw),
// compares, and writes the artifacts. The
// returned error is nil even when parity fails: check Report.Holds.
func Run(ctx context.Context, rc Config) (*Result, error) {
	began := time.Now()
	if rc.Now.IsZero() {
		rc.Now = began.UTC()
	}
	f, err := os.Open(rc.Events)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	defer f.Close()
	tr := &tracer{rows: map[uint64]TraceRow{}}
	rc.Config.Trace = tr.windower
	// A bounded run keeps every window: windows.json is the record of the
	// whole input, and parity compares every final window's digest and
	// partitions, which a day rollup does not keep (docs/history.md).
	rc.Config.KeepHistory = true
	p, err := pipeline.Start(ctx, rc.Config)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := requireEmpty(ctx, p); err != nil {
		return nil, err
	}

	res := &Result{}
	cfg := p.Config()
	sampler := sample(ctx, p, began, tr, &res.Metrics)
	stopProgress := progress(ctx, p, rc.Progress, began, tr)

	in := ingest.New(p.Admin.JS, ingest.Config{
		Partitions: cfg.Partitions, HotKeys: cfg.HotKeys, Validator: p.Validator, HeartbeatEvery: rc.HeartbeatEvery,
		EndOfStream: true, Now: func() time.Time { return rc.Now }, Linger: cfg.Waits.IngestLinger,
		OnAck: func(msgID string, seq uint64, dup bool) {
			if !dup {
				return
			}
			id, _, _ := strings.Cut(msgID, ":")
			tr.mu.Lock()
			tr.jsDups = append(tr.jsDups, TraceRow{Seq: seq, EventID: id, Decision: "duplicate", Layer: "jetstream"})
			tr.mu.Unlock()
		},
	})
	pace := ingest.Rate(rc.Rate)
	if rc.MaxBacklog > 0 {
		pace = holdBacklog(backlogOf(p), uint64(rc.MaxBacklog), rc.StallTimeout, pace)
	}
	if res.Ingest, err = ingest.FilePaced(ctx, in, f, pace, nil); err != nil {
		return nil, err
	}
	if err := drain(ctx, p, rc.StallTimeout); err != nil {
		return nil, fmt.Errorf("run: waiting for the pipeline to drain: %w", err)
	}
	stopProgress()
	sampler()
	res.Crashes = p.Crashes()
	if rc.AfterDrain != nil {
		if err := rc.AfterDrain(ctx, p); err != nil {
			return nil, err
		}
	}

	if res.Windows, err = p.Windows(ctx); err != nil {
		return nil, err
	}
	if res.Late, err = p.LateRows(ctx); err != nil {
		return nil, err
	}
	if res.Rejected, err = p.RejectedRows(ctx); err != nil {
		return nil, err
	}
	res.Trace = tr.finish(res.Rejected)

	// The referee (docs/spec.md §8) reads the fixed raw snapshot the stream
	// read: RAW as stored, in order, heartbeats and broker timestamps
	// included, and judges every event itself.
	batch, _, err := reconcile.CountRaw(ctx, p.Admin.JS, wire.Raw, reconcile.Config{
		Validator: p.Validator, DefaultIngestedAt: rc.Now, Partitions: cfg.Partitions, HotKeys: cfg.HotKeys,
		Lateness: cfg.Lateness, Grace: cfg.Grace, Horizon: cfg.ReplayHorizon, SourceIdle: cfg.SourceIdle,
	})
	if err != nil {
		return nil, fmt.Errorf("run: batch pass over RAW: %w", err)
	}
	res.Report = reconcile.Compare(batch, res.Windows, res.Late)
	res.Elapsed = time.Since(began)
	if rc.Out != "" {
		if err := res.write(rc.Out); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// requireEmpty refuses to run against streams that already hold data: a
// bounded run's artifacts must describe exactly its own input.
func requireEmpty(ctx context.Context, p *pipeline.Pipeline) error {
	st, err := p.Admin.JS.Stream(ctx, wire.Raw)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs > 0 {
		return fmt.Errorf("run: stream RAW at %s already holds %d messages; run needs an empty deployment (or use ingest/replay against a live one)", p.NATSURL, info.State.Msgs)
	}
	return nil
}
