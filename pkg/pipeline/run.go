package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/dashboard"
	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/windower"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// RunConfig configures a bounded run (receiptctl run).
type RunConfig struct {
	Config
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
	AfterDrain func(ctx context.Context, p *Pipeline) error
	// Rate paces ingest to this many records per second (0: unpaced).
	Rate int
	// Now is the ingest time stamped on records without ingested_at, and
	// given to the batch pass for the same records (default: start time).
	Now time.Time
	// StallTimeout bounds the wait for the drain: when no consumer of a
	// stage with work left acknowledges anything new for this long, Run
	// stops with a *StuckError naming the stuck stage. Zero means
	// DefaultStallTimeout; negative waits until ctx ends.
	StallTimeout time.Duration
}

// TraceRow is one line of trace.ndjson: what happened to one message.
type TraceRow struct {
	Seq       uint64 `json:"seq"`
	Partition int    `json:"partition"`
	EventID   string `json:"event_id,omitempty"`
	// Decision is counted, duplicate, late, rejected, ignored (a valid
	// event of a type that never counts) or dropped_retired.
	Decision   string `json:"decision"`
	Correction bool   `json:"correction,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Layer says which dedup layer dropped a duplicate: jetstream (the
	// Nats-Msg-Id window) or ledger (the Redis ledger).
	Layer    string `json:"layer,omitempty"`
	WindowID string `json:"window,omitempty"`
	// Version is the partition partial's version after the event.
	Version  int64  `json:"version_after,omitempty"`
	ValidSeq uint64 `json:"valid_seq,omitempty"`
}

// RunResult is what a bounded run produced.
type RunResult struct {
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

type tracer struct {
	mu          sync.Mutex
	rows        map[uint64]TraceRow // by RAW seq
	jsDups      []TraceRow
	corrections int64
	late        int64
}

func (t *tracer) windower(_ int, recs []windower.Trace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		row := TraceRow{Seq: r.RawSeq, Partition: r.Partition, EventID: r.EventID, WindowID: r.Decision.WindowID, ValidSeq: r.ValidSeq}
		switch r.Decision.Code {
		case ledger.Counted:
			row.Decision, row.Version = "counted", r.Decision.Version
		case ledger.Correction:
			row.Decision, row.Version, row.Correction = "counted", r.Decision.Version, true
			t.corrections++
		case ledger.Late:
			row.Decision, row.Version, row.Reason = "late", r.Decision.Version, wire.ReasonAfterGrace
			t.late++
		case ledger.Duplicate:
			row.Decision, row.Layer = "duplicate", "ledger"
		case ledger.Ignored:
			row.Decision = "ignored"
		case ledger.Retired:
			row.Decision, row.Reason = "dropped_retired", "window retired"
		default:
			continue // heartbeats and replays of applied messages
		}
		if _, seen := t.rows[r.RawSeq]; !seen {
			t.rows[r.RawSeq] = row
		}
	}
}

// Run replays rc.Events through a pipeline until it drains, then runs the
// batch pass over the RAW stream the pipeline read (reconcile.CountRaw),
// compares, and writes the artifacts. The
// returned error is nil even when parity fails: check Report.Holds.
func Run(ctx context.Context, rc RunConfig) (*RunResult, error) {
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
	p, err := Start(ctx, rc.Config)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := p.requireEmpty(ctx); err != nil {
		return nil, err
	}

	res := &RunResult{}
	sampler := p.sample(ctx, began, tr, &res.Metrics)
	stopProgress := p.progress(ctx, rc.Progress, began, tr)

	in := ingest.New(p.Admin.JS, ingest.Config{
		Partitions: p.cfg.Partitions, HotKeys: p.cfg.HotKeys, Validator: p.Validator, HeartbeatEvery: rc.HeartbeatEvery,
		EndOfStream: true, Now: func() time.Time { return rc.Now }, Linger: p.cfg.waits().IngestLinger,
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
	if res.Ingest, err = ingest.FileAtRate(ctx, in, f, rc.Rate, nil); err != nil {
		return nil, err
	}
	if err := p.drain(ctx, rc.StallTimeout); err != nil {
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
	batch, _, err := reconcile.CountRaw(ctx, p.Admin.JS, wire.Raw, reconcile.Options{
		Validator: p.Validator, DefaultIngestedAt: rc.Now, Partitions: p.cfg.Partitions, HotKeys: p.cfg.HotKeys,
		Lateness: p.cfg.Lateness, Grace: p.cfg.Grace, Horizon: p.cfg.ReplayHorizon,
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
func (p *Pipeline) requireEmpty(ctx context.Context) error {
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

func (t *tracer) finish(rejected []reconcile.RejectedRow) []TraceRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	rows := make([]TraceRow, 0, len(t.rows)+len(rejected)+len(t.jsDups))
	for _, r := range t.rows {
		rows = append(rows, r)
	}
	for _, r := range rejected {
		rows = append(rows, TraceRow{Seq: r.Seq, EventID: r.EventID, Decision: "rejected", Reason: string(r.Reason)})
	}
	rows = append(rows, t.jsDups...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Seq < rows[j].Seq })
	return rows
}

// Windows reads every window snapshot from the KV bucket, sorted by start.
func (p *Pipeline) Windows(ctx context.Context) ([]wire.Window, error) {
	return ReadWindows(ctx, p.Admin.JS, p.Names)
}

// ReadWindows reads every window snapshot of generation n from its KV
// bucket, sorted by start.
func ReadWindows(ctx context.Context, js jetstream.JetStream, n wire.Names) ([]wire.Window, error) {
	kv, err := js.KeyValue(ctx, n.Bucket())
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, wire.WindowKey("*"), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("run: watch windows: %w", err)
	}
	defer w.Stop()
	var out []wire.Window
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var s wire.Window
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			return nil, fmt.Errorf("run: %s: %w", e.Key(), err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// LateRows reads LATE, one row per distinct event id (first occurrence).
func (p *Pipeline) LateRows(ctx context.Context) ([]reconcile.LateRow, error) {
	return ReadLate(ctx, p.Admin.JS, p.Names)
}

// ReadLate reads generation n's LATE stream, one row per distinct event id
// (first occurrence).
func ReadLate(ctx context.Context, js jetstream.JetStream, n wire.Names) ([]reconcile.LateRow, error) {
	seen := map[string]bool{}
	var out []reconcile.LateRow
	err := stream.ReadAll(ctx, js, n.Stream(wire.Late), func(m jetstream.Msg) error {
		var le wire.LateEvent
		if err := json.Unmarshal(m.Data(), &le); err != nil {
			return fmt.Errorf("run: LATE message: %w", err)
		}
		if seen[le.EventID] {
			return nil
		}
		seen[le.EventID] = true
		out = append(out, reconcile.LateRow{EventID: le.EventID, WindowID: le.WindowID, Reason: le.Reason,
			Watermark: le.Watermark, Partition: le.Partition, Seq: le.Seq})
		return nil
	})
	return out, err
}

// RejectedRows reads REJECTED, one row per rejected RAW message.
func (p *Pipeline) RejectedRows(ctx context.Context) ([]reconcile.RejectedRow, error) {
	seen := map[uint64]bool{}
	var out []reconcile.RejectedRow
	err := stream.ReadAll(ctx, p.Admin.JS, p.Names.Stream(wire.Rejected), func(m jetstream.Msg) error {
		h := m.Headers()
		seq, _ := strconv.ParseUint(h.Get(wire.HdrRawSeq), 10, 64)
		if seen[seq] {
			return nil
		}
		seen[seq] = true
		out = append(out, reconcile.RejectedRow{EventID: h.Get(wire.HdrEventID),
			Reason: contract.Reason(h.Get(wire.HdrReason)), Detail: h.Get(wire.HdrDetail), Seq: seq})
		return nil
	})
	return out, err
}

// sample records metrics.json points every 200ms until the returned stop
// function is called.
func (p *Pipeline) sample(ctx context.Context, began time.Time, tr *tracer, out *[]dashboard.Sample) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	take := func() {
		s := dashboard.Sample{T: time.Since(began).Seconds()}
		if b, _, err := p.Backlog(ctx); err == nil {
			for _, v := range b {
				s.Backlog += v
			}
		}
		for q := 0; q < p.cfg.Partitions; q++ {
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

func redisUsedMemory(ctx context.Context, p *Pipeline) int64 {
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
func (p *Pipeline) progress(ctx context.Context, w io.Writer, began time.Time, tr *tracer) (stop func()) {
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

func (r *RunResult) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	writeJSON := func(name string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
	}
	writeNDJSON := func(name string, n int, row func(i int) any) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		enc := json.NewEncoder(f)
		for i := 0; i < n; i++ {
			if err := enc.Encode(row(i)); err != nil {
				f.Close()
				return err
			}
		}
		return f.Close()
	}
	windows := r.Windows
	if windows == nil {
		windows = []wire.Window{}
	}
	var errs []error
	errs = append(errs,
		writeJSON("windows.json", windows),
		writeNDJSON("late.ndjson", len(r.Late), func(i int) any { return r.Late[i] }),
		writeNDJSON("rejected.ndjson", len(r.Rejected), func(i int) any { return r.Rejected[i] }),
		writeNDJSON("trace.ndjson", len(r.Trace), func(i int) any { return r.Trace[i] }),
		writeJSON("metrics.json", map[string]any{"samples": r.Metrics, "crashes": r.Crashes, "ingest": r.Ingest, "elapsed_seconds": r.Elapsed.Seconds()}),
		dashboard.WriteChartFile(dir, r.Metrics),
	)
	pj, err := os.Create(filepath.Join(dir, "parity.json"))
	if err == nil {
		errs = append(errs, r.Report.WriteJSON(pj), pj.Close())
	} else {
		errs = append(errs, err)
	}
	pm, err := os.Create(filepath.Join(dir, "parity.md"))
	if err == nil {
		errs = append(errs, r.Report.WriteMarkdown(pm), pm.Close())
	} else {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
