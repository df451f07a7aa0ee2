package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

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
	var out []reconcile.LateRow
	err := stream.ReadLate(ctx, js, n, func(le wire.LateEvent) error {
		out = append(out, reconcile.LateRow{EventID: le.EventID, WindowID: le.WindowID, Reason: le.Reason,
			Watermark: le.Watermark, Partition: le.Partition, Seq: le.Seq, Source: le.Source})
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
