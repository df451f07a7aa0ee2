package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// sourcesIdle is the --source-idle of TestSeveralSourcesParity: short, so
// that the sources' pauses make them idle and live again within the test.
const sourcesIdle = 300 * time.Millisecond

// TestSeveralSourcesParity (docs/spec.md §3.1, §8): four sources write RAW
// side by side, each in its own event-time order from its own start (one
// two hours behind), with pauses longer and shorter than --source-idle,
// retries, other types and heartbeats; one leaves early and comes back.
// Whatever order RAW ends up in, the referee's replay of RAW (its own
// per-source rule) agrees with every final window the pipeline published.
// The same RAW judged as one source (the rule before §3.1, the source ids
// stripped) does not: the referee tells the two rules apart.
func TestSeveralSourcesParity(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { severalSourcesParity(t, seed) })
	}
}

func severalSourcesParity(t *testing.T, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	p, err := pipeline.Start(ctx, pipeline.Config{NATSURL: natsURL, RedisURL: r.URL(), PublisherTick: 100 * time.Millisecond, SourceIdle: sourcesIdle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	type plan struct {
		id     string
		stores []string
		from   time.Time
		n      int
	}
	plans := []plan{
		{"live", []string{"store-1", "store-2"}, day.Add(13 * time.Hour), 900},
		{"catching-up", []string{"store-3"}, day.Add(11 * time.Hour), 300},
		{"shared", []string{"store-1", "store-4"}, day.Add(12*time.Hour + 30*time.Minute), 500},
		{"legacy", []string{"store-5"}, day.Add(12 * time.Hour), 300},
	}
	// The catching-up source's first record is stored before the others
	// start, so that it holds its partition from the start.
	first := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(plans))
	for i, pl := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i != 1 {
				select {
				case <-first:
				case <-ctx.Done():
					return
				}
			}
			errs <- feedSource(ctx, p, rand.New(rand.NewPCG(seed, uint64(i))), pl.id, pl.stores, pl.from, pl.n, func() {
				if i == 1 {
					close(first)
				}
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The operator's end of stream closes every window.
	eos := ingest.New(p.Admin.JS, ingest.Config{Partitions: 8, Validator: p.Validator, EndOfStream: true, SourceID: "operator"})
	if err := eos.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	windows, err := p.Windows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	late, err := p.LateRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := reconcile.Config{Validator: p.Validator, Partitions: 8, Lateness: p.Config().Lateness, Grace: p.Config().Grace,
		Horizon: p.Config().ReplayHorizon, SourceIdle: sourcesIdle}
	batch, _, err := reconcile.CountRaw(ctx, p.Admin.JS, wire.Raw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep := reconcile.Compare(batch, windows, late)
	if !rep.Holds {
		b, _ := json.MarshalIndent(rep, "", "  ")
		t.Fatalf("parity does not hold over several sources:\n%s", b)
	}
	final := 0
	for _, w := range windows {
		if w.Status == "final" {
			final++
		}
	}
	t.Logf("parity holds: %d final windows, %d LATE rows, %d counted", final, len(late), batch.InWindows)

	// One source: the same RAW with the source ids stripped.
	old, err := reconcile.NewBatch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = stream.ReadAll(ctx, p.Admin.JS, wire.Raw, func(m jetstream.Msg) error {
		rec, err := reconcile.RecordOf(m)
		if err != nil {
			return err
		}
		rec.Source, rec.Leave = wire.SourceLegacy, false
		return old.AddRecord(rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	if reconcile.Compare(old, windows, late).Holds {
		t.Fatal("the stream's windows also agree with RAW judged as one source: this run does not tell the rules apart")
	}
}

// feedSource sends n submissions (and other types, and retries) of stores
// in event-time order from from, as source id, in bursts with pauses
// shorter and longer than sourcesIdle, a heartbeat after every burst; it
// leaves once in the middle and comes back under the same id. started is
// called once its first record is stored.
func feedSource(ctx context.Context, p *pipeline.Pipeline, r *rand.Rand, id string, stores []string, from time.Time, n int, started func()) error {
	srcID := id
	if id == "legacy" {
		srcID = wire.SourceLegacy // RAW as written before sources had ids
	}
	open := func() *ingest.Ingester {
		return ingest.New(p.Admin.JS, ingest.Config{Partitions: 8, Validator: p.Validator, SourceID: srcID, HeartbeatEvery: 1 << 30})
	}
	in := open()
	at := from
	for i := 0; i < n; i++ {
		at = at.Add(time.Duration(r.IntN(20)) * time.Second)
		ev := at
		if r.IntN(10) == 0 {
			ev = at.Add(-time.Duration(r.IntN(8)) * time.Minute) // disorder, some of it past the lateness
		}
		typ := "submitted"
		if r.IntN(6) == 0 {
			typ = "viewed"
		}
		eid := fmt.Sprintf("%s-%d", id, i)
		if i > 0 && r.IntN(25) == 0 {
			eid = fmt.Sprintf("%s-%d", id, r.IntN(i)) // a retry, or a conflicting copy
		}
		line, _ := json.Marshal(map[string]any{"schema_version": 2, "event_id": eid, "receipt_id": "r-" + eid, "type": typ,
			"occurred_at": ev.Format(time.RFC3339Nano), "partition_key": stores[r.IntN(len(stores))], "producer_version": "t/1"})
		if err := in.Publish(ctx, line); err != nil {
			return err
		}
		if i == 0 {
			if err := in.Heartbeat(ctx); err != nil {
				return err
			}
			if err := untilRawHolds(ctx, p, 1); err != nil {
				return err
			}
			started()
		}
		if r.IntN(40) == 0 {
			if err := in.Heartbeat(ctx); err != nil {
				return err
			}
			pause := time.Duration(r.IntN(int(3 * sourcesIdle)))
			if err := stream.Pause(ctx, pause); err != nil {
				return err
			}
		}
		if i == n/2 {
			// It leaves, and comes back under its id.
			if err := in.Close(ctx); err != nil {
				return err
			}
			in = open()
		}
	}
	return in.Close(ctx)
}

// untilRawHolds waits until RAW holds at least n messages.
func untilRawHolds(ctx context.Context, p *pipeline.Pipeline, n uint64) error {
	for {
		st, err := p.Admin.JS.Stream(ctx, wire.Raw)
		if err != nil {
			return err
		}
		if st.CachedInfo().State.Msgs >= n {
			return nil
		}
		if err := stream.Pause(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}
