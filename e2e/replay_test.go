package e2e

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ingest"
	"github.com/receiptflow/receiptflow/pkg/pipeline"
	"github.com/receiptflow/receiptflow/pkg/replay"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/testenv"
	"github.com/receiptflow/receiptflow/pkg/validator"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// livePipeline starts the services against a real nats-server and Redis
// and ingests path (closing every window when eos is set).
func livePipeline(t *testing.T, cfg pipeline.Config, path string, eos bool) *pipeline.Pipeline {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, natsURL := testenv.NATS(t)
	r := testenv.RedisServer(t)
	cfg.NATSURL, cfg.RedisURL = natsURL, r.URL()
	cfg.PublisherTick = 100 * time.Millisecond
	p, err := pipeline.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := ingest.New(p.Admin.JS, ingest.Config{Partitions: 8, Validator: p.Validator, EndOfStream: eos})
	if _, err := ingest.File(ctx, in, f, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func windowsNow(t *testing.T, p *pipeline.Pipeline) []wire.Window {
	t.Helper()
	ws, err := p.Windows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func TestReplayOfRawAndValidChangesNoCountAndNoVersion(t *testing.T) {
	o := troubled
	o.Events = 6000
	path, _ := writeGenerated(t, o)
	p := livePipeline(t, pipeline.Config{}, path, false) // windows still open and in grace
	before := windowsNow(t, p)
	var open int
	for _, w := range before {
		if w.Status != "final" {
			open++
		}
	}
	if open == 0 {
		t.Fatal("want some non-final windows to replay into")
	}
	requireBreakdowns(t, before)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	st, err := replay.Raw(ctx, p.Admin.JS, p.Store, validator.Config{Names: p.Names, Partitions: 8, Validator: p.Validator}, replay.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Read < o.Events/2 {
		t.Fatalf("replayed only %d RAW messages", st.Read)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := windowsNow(t, p); !reflect.DeepEqual(project(got), project(before)) {
		t.Fatalf("RAW replay changed windows:\n got %+v\nwant %+v", project(got), project(before))
	}

	// VALID holds frames (a validator batch each): replay all but the
	// first, live ones and the RAW replay's.
	vs, err := p.Admin.JS.Stream(ctx, p.Names.Stream(wire.Valid))
	if err != nil {
		t.Fatal(err)
	}
	last := vs.CachedInfo().State.LastSeq
	if last < 3 {
		t.Fatalf("VALID holds %d messages, want frames of the live run and of the RAW replay", last)
	}
	vst, err := replay.Valid(ctx, p.Admin.JS, p.Names, replay.Range{From: 2, To: last})
	if err != nil {
		t.Fatal(err)
	}
	if vst.Read != int(last-1) {
		t.Fatalf("replayed %d VALID messages, want %d", vst.Read, last-1)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := windowsNow(t, p); !reflect.DeepEqual(project(got), project(before)) {
		t.Fatalf("VALID replay changed windows:\n got %+v\nwant %+v", project(got), project(before))
	}
	// The state the snapshots come from is unchanged too: a replay that
	// added to a store's breakdown without changing a count would not
	// show in KV until the window's next change.
	requireStateBreakdowns(t, p, before)
	// The replays really went through the windower: VALID grew by the
	// VALID replay, and holds every RAW record twice (live, replayed).
	info, _ := vs.Info(ctx)
	if info.State.Msgs != last+uint64(vst.Read) {
		t.Fatalf("VALID holds %d messages after replaying %d VALID onto %d", info.State.Msgs, vst.Read, last)
	}
	seen := map[uint64]int{}
	if err := stream.ReadValid(ctx, p.Admin.JS, p.Names.Stream(wire.Valid), func(v stream.ValidRecord) error {
		if v.Seq <= last {
			seen[v.RawSeq]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for seq, n := range seen {
		if n != 2 {
			t.Fatalf("RAW sequence %d is %d times in VALID after one RAW replay, want 2", seq, n)
		}
	}
}

func TestReplayAfterRetirementChangesNothing(t *testing.T) {
	o := troubled
	o.Events, o.Hours = 6000, 48
	path, _ := writeGenerated(t, o)
	p := livePipeline(t, pipeline.Config{ReplayHorizon: time.Hour}, path, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := windowsNow(t, p)
	// Every window is final after the end of stream; wait until each
	// partition retired its state.
	testenv.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		return retainedState(ctx, p)
	})
	if _, err := replay.Raw(ctx, p.Admin.JS, p.Store, validator.Config{Names: p.Names, Partitions: 8, Validator: p.Validator}, replay.Range{From: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitDrained(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := windowsNow(t, p); !reflect.DeepEqual(project(got), project(before)) {
		t.Fatalf("replay after retirement changed windows")
	}
	if err := retainedState(ctx, p); err != nil {
		t.Fatalf("replay re-created retired state: %v", err)
	}
}

// retainedState fails while any partition still holds ledger entries or
// window state.
func retainedState(ctx context.Context, p *pipeline.Pipeline) error {
	for q := 0; q < 8; q++ {
		ck, err := p.Store.Checkpoint(ctx, q)
		if err != nil {
			return err
		}
		ids, err := p.Store.Windows(ctx, q)
		if err != nil {
			return err
		}
		if ck.Entries != 0 || len(ids) != 0 {
			return &stateError{q, ck.Entries, len(ids)}
		}
	}
	return nil
}

type stateError struct {
	p       int
	entries int64
	windows int
}

func (e *stateError) Error() string {
	return "partition " + itoa(e.p) + " holds " + itoa(int(e.entries)) + " ledger entries and " + itoa(e.windows) + " windows"
}

// TestReplayLeavesNoConsumerBehind (issue 14, papercut 1): a replay of RAW
// and of VALID deletes the consumers it read with, and the health's
// backlog counts the pipeline's durable consumers only, not an ordered
// consumer some other reader left on RAW. Before, the replay's consumer
// stayed on RAW and showed as a phantom backlog on the health panel.
func TestReplayLeavesNoConsumerBehind(t *testing.T) {
	o := troubled
	o.Events = 2000
	path, _ := writeGenerated(t, o)
	// A short --stale-after: the health is written on change or every
	// keep-alive (a quarter of it), and the reader's consumer changes
	// nothing in it.
	p := livePipeline(t, pipeline.Config{StaleAfter: 2 * time.Second}, path, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := replay.Raw(ctx, p.Admin.JS, p.Store, validator.Config{Names: p.Names, Partitions: 8, Validator: p.Validator}, replay.Range{From: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := replay.Valid(ctx, p.Admin.JS, p.Names, replay.Range{From: 1}); err != nil {
		t.Fatal(err)
	}
	foreign := func() []string {
		var names []string
		for _, base := range []string{wire.Raw, wire.Valid} {
			st, err := p.Admin.JS.Stream(ctx, p.Names.Stream(base))
			if err != nil {
				t.Fatal(err)
			}
			l := st.ListConsumers(ctx)
			for ci := range l.Info() {
				if !p.Names.OwnsConsumer(ci.Name) {
					names = append(names, base+"/"+ci.Name)
				}
			}
			if err := l.Err(); err != nil {
				t.Fatal(err)
			}
		}
		return names
	}
	if left := foreign(); len(left) > 0 {
		t.Errorf("consumers left after the replays: %v", left)
	}

	// Another reader's ordered consumer on RAW, read part way, stays.
	raw, err := p.Admin.JS.Stream(ctx, wire.Raw)
	if err != nil {
		t.Fatal(err)
	}
	c, err := raw.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(10)
	if err != nil {
		t.Fatal(err)
	}
	for range b.Messages() {
	}
	other := c.CachedInfo().Name
	if left := foreign(); len(left) != 1 {
		t.Fatalf("foreign consumers %v, want the reader's %s", left, other)
	}
	kv, err := p.Admin.JS.KeyValue(ctx, p.Names.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	// The health written after the reader's consumer exists (the publisher
	// writes it every PublisherTick).
	since := time.Now()
	for {
		e, err := kv.Get(ctx, wire.HealthKey)
		if err != nil {
			t.Fatal(err)
		}
		var h wire.Health
		if err := json.Unmarshal(e.Value(), &h); err != nil {
			t.Fatal(err)
		}
		if h.UpdatedAt.After(since.Add(200 * time.Millisecond)) {
			if _, ok := h.Backlog[other]; ok {
				t.Errorf("the health's backlog counts the reader's consumer %s: %v", other, h.Backlog)
			}
			for name := range h.Backlog {
				if !p.Names.OwnsConsumer(name) {
					t.Errorf("the health's backlog counts %s, not a pipeline durable: %v", name, h.Backlog)
				}
			}
			if want := 8 + 8 + 1; len(h.Backlog) != want {
				t.Errorf("the health's backlog has %d consumers, want %d: %v", len(h.Backlog), want, h.Backlog)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requireBreakdowns checks that the windows carry real breakdowns (so that
// comparing them before and after is not comparing nothing): each adds up
// to its window's count, and some window has several stores and amounts.
func requireBreakdowns(t *testing.T, ws []wire.Window) {
	t.Helper()
	rich := false
	for _, w := range ws {
		n := w.OtherStores.Count
		for _, st := range w.ByStore {
			n += st.Count
		}
		if n != w.Count {
			t.Fatalf("window %s: breakdown adds up to %d, count is %d", w.WindowID, n, w.Count)
		}
		if w.StoreCount >= 2 && w.AmountCents > 0 {
			rich = true
		}
	}
	if !rich {
		t.Fatal("no window has a breakdown of several stores with amounts")
	}
}

// requireStateBreakdowns checks that the windower's state in Redis merges
// to each window's published breakdown.
func requireStateBreakdowns(t *testing.T, p *pipeline.Pipeline, ws []wire.Window) {
	t.Helper()
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.WindowID
	}
	views, err := p.Store.ReadAll(context.Background(), []int{0, 1, 2, 3, 4, 5, 6, 7}, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		by := map[string]wire.StoreTotal{}
		for _, v := range views {
			for _, st := range v.Partials[w.WindowID].Stores {
				wire.AddStore(by, st)
			}
		}
		if got := wire.NewBreakdown(by); !reflect.DeepEqual(got, w.Breakdown) {
			t.Fatalf("window %s: the state's breakdown is\n%+v\nthe snapshot's\n%+v", w.WindowID, got, w.Breakdown)
		}
	}
}
