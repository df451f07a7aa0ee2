// Package demo is the live sample traffic of `receiptctl demo`: a backfill
// of the last hours, then steady wall-clock traffic with every seed case
// injected in turn (retry, out-of-order, correction within grace, too-late
// event, unsupported schema, conflicting duplicate, other types, malformed
// record) and an idle period that makes readers see the data go stale.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// Sink receives records; *ingest.Ingester fits.
type Sink interface {
	Publish(ctx context.Context, line []byte) error
}

// Config tunes the feed; zero fields take their defaults.
type Config struct {
	// Backfill is how much past traffic to send first (default 4h).
	Backfill time.Duration
	// Every is the pause between live events (default 250ms).
	Every time.Duration
	// CaseEvery is how often a seed case is injected (default 15s).
	CaseEvery time.Duration
	// IdleEvery and IdleFor: every IdleEvery the source goes silent for
	// IdleFor (defaults 6m and 2m30s; IdleEvery < 0 disables).
	IdleEvery time.Duration
	IdleFor   time.Duration
	Stores    int
	Seed      uint64
	Now       func() time.Time
	// OnCase is told which case was just injected.
	OnCase func(name string)
}

// withDefaults returns o with its zero fields set to their defaults.
func (o Config) withDefaults() Config {
	if o.Backfill == 0 {
		o.Backfill = 4 * time.Hour
	}
	if o.Every <= 0 {
		o.Every = 250 * time.Millisecond
	}
	if o.CaseEvery <= 0 {
		o.CaseEvery = 15 * time.Second
	}
	if o.IdleEvery == 0 {
		o.IdleEvery = 6 * time.Minute
	}
	if o.IdleFor <= 0 {
		o.IdleFor = 150 * time.Second
	}
	if o.Stores <= 0 {
		o.Stores = 6
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Cases lists the seed cases in the order the feed injects them.
var Cases = []string{"retry", "out_of_order", "correction", "too_late", "unsupported_schema", "conflicting_duplicate", "other_types", "malformed_json", "v1_event"}

// What says, for a reader of the demo, what case name sent and what the
// pipeline does with it.
func What(name string) string {
	switch name {
	case "retry":
		return "the last submission sent again: dropped as a duplicate, counted once"
	case "out_of_order":
		return "a submission 3 minutes older than the last: still counted in its own hour"
	case "correction":
		return "a submission of the previous hour after its end: counted in grace, the window's corrections go up"
	case "too_late":
		return "a submission 2.5 hours old, past its window's grace: routed to LATE, not counted"
	case "unsupported_schema":
		return "a record of schema_version 3: rejected"
	case "conflicting_duplicate":
		return "the last event id again with other content: rejected conflicting_duplicate"
	case "other_types":
		return "a draft_saved and a viewed event: valid, not submissions, not counted"
	case "malformed_json":
		return "a line that is not JSON: rejected"
	case "v1_event":
		return "a schema 1 record (occurred_minute): counted like a v2 one"
	case "idle":
		return "the source pauses, so readers see STALE and the pipeline's heartbeats"
	}
	return ""
}

type feed struct {
	o    Config
	sink Sink
	rng  *rand.Rand
	n    int
	last []byte // last submission, for retries and conflicts
}

// Run feeds sink until ctx ends.
func Run(ctx context.Context, sink Sink, o Config) error {
	o = o.withDefaults()
	f := &feed{o: o, sink: sink, rng: rand.New(rand.NewPCG(o.Seed, 0x5eed))}
	now := o.Now().UTC()
	// Backfill: past traffic in event-time order, every 20s of event time.
	for t := now.Add(-o.Backfill); t.Before(now); t = t.Add(20 * time.Second) {
		if err := f.submit(ctx, t); err != nil {
			return err
		}
	}
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	nextCase := time.Now().Add(o.CaseEvery / 3)
	nextIdle := time.Now().Add(o.IdleEvery)
	ci := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// A tick and the end may be ready together, and select picks
		// either: nothing is sent once ctx has ended.
		if ctx.Err() != nil {
			return nil
		}
		if o.IdleEvery > 0 && time.Now().After(nextIdle) {
			if o.OnCase != nil {
				o.OnCase("idle")
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.IdleFor):
			}
			nextIdle = time.Now().Add(o.IdleEvery)
		}
		if err := f.submit(ctx, o.Now().UTC()); err != nil {
			return err
		}
		if time.Now().After(nextCase) {
			name := Cases[ci%len(Cases)]
			ci++
			if err := f.inject(ctx, name); err != nil {
				return err
			}
			if o.OnCase != nil {
				o.OnCase(name)
			}
			nextCase = time.Now().Add(o.CaseEvery)
		}
	}
}

type event struct {
	SchemaVersion   int            `json:"schema_version"`
	EventID         string         `json:"event_id"`
	ReceiptID       string         `json:"receipt_id"`
	Type            string         `json:"type"`
	OccurredAt      string         `json:"occurred_at,omitempty"`
	OccurredMinute  int64          `json:"occurred_minute,omitempty"`
	PartitionKey    string         `json:"partition_key"`
	ProducerVersion string         `json:"producer_version,omitempty"`
	Payload         map[string]any `json:"payload,omitempty"`
}

func (f *feed) make(t time.Time, typ string) event {
	f.n++
	return event{
		SchemaVersion: 2, EventID: fmt.Sprintf("demo-%d-%d", f.o.Seed, f.n), ReceiptID: fmt.Sprintf("rcpt-%d", f.n),
		Type: typ, OccurredAt: t.UTC().Format(time.RFC3339Nano), PartitionKey: fmt.Sprintf("store-%d", f.rng.IntN(f.o.Stores)),
		ProducerVersion: "demo/1", Payload: map[string]any{"amount_cents": 100 + f.rng.IntN(9900), "currency": "EUR"},
	}
}

func (f *feed) send(ctx context.Context, ev any) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return b, f.sink.Publish(ctx, b)
}

func (f *feed) submit(ctx context.Context, t time.Time) error {
	b, err := f.send(ctx, f.make(t, "submitted"))
	f.last = b
	return err
}

func (f *feed) inject(ctx context.Context, name string) error {
	now := f.o.Now().UTC()
	switch name {
	case "retry":
		if f.last != nil {
			return f.sink.Publish(ctx, f.last)
		}
	case "out_of_order":
		return f.submit(ctx, now.Add(-3*time.Minute))
	case "correction":
		// An event of the previous hour: once the watermark has passed
		// that hour's end (5 minutes into this hour) it is a correction.
		start := now.Truncate(time.Hour)
		return f.submit(ctx, start.Add(-10*time.Minute))
	case "too_late":
		return f.submit(ctx, now.Add(-150*time.Minute))
	case "unsupported_schema":
		ev := f.make(now, "submitted")
		ev.SchemaVersion = 3
		_, err := f.send(ctx, ev)
		return err
	case "conflicting_duplicate":
		if f.last != nil {
			var ev event
			if err := json.Unmarshal(f.last, &ev); err == nil {
				ev.ReceiptID += "-changed"
				_, err := f.send(ctx, ev)
				return err
			}
		}
	case "other_types":
		if _, err := f.send(ctx, f.make(now, "draft_saved")); err != nil {
			return err
		}
		_, err := f.send(ctx, f.make(now, "viewed"))
		return err
	case "malformed_json":
		return f.sink.Publish(ctx, []byte(`{"schema_version":2,"event_id":"broken`))
	case "v1_event":
		ev := f.make(now, "submitted")
		ev.SchemaVersion, ev.OccurredAt, ev.OccurredMinute, ev.ProducerVersion = 1, "", now.Unix()/60, ""
		_, err := f.send(ctx, ev)
		return err
	}
	return nil
}
