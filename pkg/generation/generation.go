// Package generation manages state generations: the active-generation
// pointer readers follow, the parity record a generation must have before
// it may become active, and the rebuild that replays RAW into a separate
// Redis key space and KV bucket, reconciles it, and only then switches.
package generation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/reconcile"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Pointer is the value of the active-generation pointer
// (wire.ControlBucket, key wire.ActiveKey).
type Pointer = wire.Pointer

// Parity is the record of a generation's last reconciliation, kept in the
// control bucket under ParityKey(gen).
type Parity struct {
	Generation string            `json:"generation"`
	Holds      bool              `json:"holds"`
	CheckedAt  time.Time         `json:"checked_at"`
	RawLastSeq uint64            `json:"raw_last_seq"`
	Summary    reconcile.Summary `json:"summary"`
}

// ParityKey is the control-bucket key of gen's parity record.
func ParityKey(gen string) string { return "parity." + gen }

// ErrNoParity is returned by Switch when the target generation has no
// passing parity record.
var ErrNoParity = errors.New("generation: no passing parity record")

func control(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, wire.ControlBucket)
	if err != nil {
		return nil, fmt.Errorf("generation: control bucket: %w", err)
	}
	return kv, nil
}

// Active returns the active generation and the pointer's KV revision.
// stream.Ensure writes the pointer of the default generation; a bucket
// without it (set up by an older version, or the key deleted) reads as
// DefaultGeneration at revision 0.
func Active(ctx context.Context, js jetstream.JetStream) (Pointer, uint64, error) {
	kv, err := control(ctx, js)
	if err != nil {
		return Pointer{}, 0, err
	}
	e, err := kv.Get(ctx, wire.ActiveKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pointer{Generation: wire.DefaultGeneration}, 0, nil
	}
	if err != nil {
		return Pointer{}, 0, fmt.Errorf("generation: read pointer: %w", err)
	}
	var p Pointer
	if err := json.Unmarshal(e.Value(), &p); err != nil || p.Generation == "" {
		return Pointer{}, 0, fmt.Errorf("generation: pointer %q is corrupt", e.Value())
	}
	return p, e.Revision(), nil
}

// RecordParity stores gen's parity record.
func RecordParity(ctx context.Context, js jetstream.JetStream, rec Parity) error {
	kv, err := control(ctx, js)
	if err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, ParityKey(rec.Generation), b); err != nil {
		return fmt.Errorf("generation: record parity: %w", err)
	}
	return nil
}

// ParityOf returns gen's parity record, or ErrNoParity.
func ParityOf(ctx context.Context, js jetstream.JetStream, gen string) (Parity, error) {
	kv, err := control(ctx, js)
	if err != nil {
		return Parity{}, err
	}
	e, err := kv.Get(ctx, ParityKey(gen))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Parity{}, fmt.Errorf("%w for generation %s", ErrNoParity, gen)
	}
	if err != nil {
		return Parity{}, fmt.Errorf("generation: read parity: %w", err)
	}
	var p Parity
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Parity{}, fmt.Errorf("generation: parity record of %s is corrupt: %w", gen, err)
	}
	return p, nil
}

// Switch makes gen the active generation. It refuses unless gen's last
// parity record holds, or force is set; the pointer is updated by revision
// compare-and-set, so two concurrent switches cannot both win. The
// previous generation is left as it is, so a switch can be rolled back by
// switching to it again.
func Switch(ctx context.Context, js jetstream.JetStream, gen string, force bool) (Pointer, error) {
	if _, err := js.KeyValue(ctx, wire.For(gen).Bucket()); err != nil {
		return Pointer{}, fmt.Errorf("generation: generation %s has no snapshot bucket: %w", gen, err)
	}
	if !force {
		p, err := ParityOf(ctx, js, gen)
		if err != nil {
			return Pointer{}, err
		}
		if !p.Holds {
			return Pointer{}, fmt.Errorf("%w: generation %s failed parity at %s (%d unexplained differences)",
				ErrNoParity, gen, p.CheckedAt.Format(time.RFC3339), p.Summary.UnexplainedDifferences)
		}
	}
	cur, rev, err := Active(ctx, js)
	if err != nil {
		return Pointer{}, err
	}
	next := Pointer{Generation: gen, Previous: cur.Generation, SwitchedAt: time.Now().UTC(), Forced: force}
	b, _ := json.Marshal(next)
	kv, err := control(ctx, js)
	if err != nil {
		return Pointer{}, err
	}
	if rev == 0 {
		_, err = kv.Create(ctx, wire.ActiveKey, b)
	} else {
		_, err = kv.Update(ctx, wire.ActiveKey, b, rev)
	}
	if err != nil {
		return Pointer{}, fmt.Errorf("generation: switch to %s (another switch raced?): %w", gen, err)
	}
	if err := markBuckets(ctx, js, next); err != nil {
		return next, fmt.Errorf("generation: switched to %s, but %w", gen, err)
	}
	return next, nil
}

// markBuckets writes wire.ActiveKey in the buckets of the generations p
// switched from and to (wire.GenerationMeta), so that a bucket whose
// publisher is stopped does not go on saying it is active. A bucket that
// no longer exists is skipped.
func markBuckets(ctx context.Context, js jetstream.JetStream, p Pointer) error {
	for _, g := range []string{p.Previous, p.Generation} {
		if g == "" {
			continue
		}
		kv, err := js.KeyValue(ctx, wire.For(g).Bucket())
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("bucket of generation %s: %w", g, err)
		}
		b, _ := json.Marshal(wire.MetaOf(g, p.Generation))
		if _, err := kv.Put(ctx, wire.ActiveKey, b); err != nil {
			return fmt.Errorf("write %s in bucket %s: %w", wire.ActiveKey, wire.For(g).Bucket(), err)
		}
	}
	return nil
}
