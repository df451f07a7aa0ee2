package explain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Deployment explains windows of a running deployment's generation: the
// snapshot from its KV bucket, the windower's records of the window from
// Redis (ledger.Store.ReadWindow: the partials and the explain records),
// and the LATE and REJECTED rows from their streams.
type Deployment struct {
	JS    jetstream.JetStream
	Store *ledger.Store
	Names wire.Names
	// Parity, if set, is a parity report whose verdict is reported.
	Parity *reconcile.Report
	// Attempts bounds the reads of a window whose snapshot and Redis state
	// disagree while the publisher catches up (default 50, RetryEvery
	// apart, default 100ms).
	Attempts   int
	RetryEvery time.Duration
}

// Explain explains window id. It errors with ErrUnknownWindow when the
// bucket has no snapshot of it (never counted, or pruned), or when its
// state in Redis is retired without an explain record kept, and with
// ErrInconsistent when the snapshot and Redis still disagree after every
// attempt. It only reads; safe for concurrent use.
func (d Deployment) Explain(ctx context.Context, id string) (*Explanation, error) {
	attempts, every := d.Attempts, d.RetryEvery
	if attempts <= 0 {
		attempts = 50
	}
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	kv, err := d.JS.KeyValue(ctx, d.Names.Bucket())
	if err != nil {
		return nil, fmt.Errorf("explain: bucket %s: %w", d.Names.Bucket(), err)
	}
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(every):
			}
		}
		e, settled, err := d.read(ctx, kv, id)
		if err != nil || settled {
			return e, err
		}
		last = fmt.Errorf("window %s: %w: the snapshot (version %d) is not the sum of the partitions' state in Redis (the publisher is behind, or state was lost)",
			id, ErrInconsistent, e.Version)
	}
	return nil, last
}

// read makes one attempt; settled is false when the snapshot and Redis
// describe different versions of the window.
func (d Deployment) read(ctx context.Context, kv jetstream.KeyValue, id string) (*Explanation, bool, error) {
	entry, err := kv.Get(ctx, wire.WindowKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, unknown(id, fmt.Sprintf("no snapshot in bucket %s (never counted, or pruned)", d.Names.Bucket()))
	}
	if err != nil {
		return nil, false, fmt.Errorf("explain: %s: %w", wire.WindowKey(id), err)
	}
	var snap wire.Window
	if err := json.Unmarshal(entry.Value(), &snap); err != nil {
		return nil, false, fmt.Errorf("explain: %s: %w", wire.WindowKey(id), err)
	}
	e := &Explanation{WindowID: id, Status: snap.Status, Version: snap.Version, Count: snap.Count, Digest: snap.Digest}
	end := snap.End.UnixMilli()
	version := snap.Status.Ordinal()
	var parts []int
	retired := false
	for _, sp := range snap.Partitions {
		r, err := d.Store.ReadWindow(ctx, sp.Partition, id)
		if err != nil {
			return nil, false, err
		}
		if !r.Held && !r.Kept {
			if r.Retired >= end {
				return nil, false, unknown(id, fmt.Sprintf("its state was retired in partition %d and its explain record is gone (pruned, or retired by a version that kept none)", sp.Partition))
			}
			return e, false, nil
		}
		if r.Held {
			parts = append(parts, sp.Partition)
		} else {
			retired = true // the partition's ledger is gone
		}
		version += r.Version
		e.OnTime += r.OnTime
		e.Duplicates += r.Duplicates
		for _, c := range r.Corrections {
			e.Corrections = append(e.Corrections, Correction{EventID: c.EventID, Version: c.Version, Partition: sp.Partition})
		}
	}
	if version != snap.Version {
		return e, false, nil
	}

	if e.Late, err = d.late(ctx, id); err != nil {
		return nil, false, err
	}
	if e.Conflicts, e.ConflictsUnknown, err = d.conflicts(ctx, id, parts, retired); err != nil {
		return nil, false, err
	}
	e.Parity = ParityOf(d.Parity, id)
	e.normalize()
	if err := e.check(snap.Corrections); err != nil {
		return nil, false, err
	}
	return e, true, nil
}

// late reads the LATE stream's rows of window id (one per event id).
func (d Deployment) late(ctx context.Context, id string) ([]Late, error) {
	var out []Late
	err := stream.ReadLate(ctx, d.JS, d.Names, func(le wire.LateEvent) error {
		if le.WindowID == id {
			out = append(out, Late{EventID: le.EventID, Reason: le.Reason, Watermark: le.Watermark, Source: le.Source})
		}
		return nil
	})
	return out, err
}

// conflicts reads the REJECTED stream's conflicting_duplicate rows of
// window id: those whose wire.HdrWindow names it, for live and retired
// windows alike. A row without the header (written before it existed, or
// whose counted copy had left RAW) is checked against the window's ledger
// in parts, its partitions not yet retired; unknown is true when such a
// row is not found there and retired says some partition's ledger is gone.
func (d Deployment) conflicts(ctx context.Context, id string, parts []int, retired bool) (out []string, unknown bool, err error) {
	seen := map[string]bool{}
	var unnamed []string
	err = stream.ReadAll(ctx, d.JS, d.Names.Stream(wire.Rejected), func(m jetstream.Msg) error {
		h := m.Headers()
		if contract.Reason(h.Get(wire.HdrReason)) != contract.ReasonConflictingDuplicate {
			return nil
		}
		evt := h.Get(wire.HdrEventID)
		if evt == "" || seen[evt] {
			return nil
		}
		switch w := h.Get(wire.HdrWindow); w {
		case id:
			seen[evt] = true
			out = append(out, evt)
		case "":
			unnamed = append(unnamed, evt)
		}
		return nil
	})
	if err != nil || len(unnamed) == 0 {
		return out, false, err
	}
	mine := map[string]bool{}
	for _, p := range parts {
		held, err := d.Store.Holds(ctx, p, id, unnamed)
		if err != nil {
			return nil, false, err
		}
		for evt := range held {
			mine[evt] = true
		}
	}
	for _, evt := range unnamed {
		switch {
		case seen[evt]:
		case mine[evt]:
			seen[evt] = true
			out = append(out, evt)
		default:
			unknown = retired // it may be in a retired partition's ledger
		}
	}
	return out, unknown, nil
}

// ForDeployment returns a function that explains window id of generation
// gen of the deployment at js and rdb (the dashboard's Explainer). It only
// reads; safe for concurrent use.
func ForDeployment(js jetstream.JetStream, rdb ledger.Client) func(ctx context.Context, gen, id string) (*Explanation, error) {
	return func(ctx context.Context, gen, id string) (*Explanation, error) {
		names := wire.For(gen)
		d := Deployment{JS: js, Store: ledger.NewStore(rdb, ledger.Config{Keys: ledger.Keys{Prefix: names.RedisPrefix()}}), Names: names}
		return d.Explain(ctx, id)
	}
}
