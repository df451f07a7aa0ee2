package windower

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// retire retires partition p's windows that are final and past the replay
// horizon: the global watermark is at least end + grace + Horizon, and the
// window's final snapshot, including this partition's latest partial, is in
// the KV bucket (so the publisher no longer needs the partial). Windows are retired oldest first; the first one whose
// final snapshot is not yet in KV stops the pass.
func (s *Service) retire(ctx context.Context, p int) error {
	global, err := s.store.GlobalWatermark(ctx, s.cfg.Partitions)
	if err != nil {
		return err
	}
	return s.retireAt(ctx, p, s.retireMark(global))
}

// retireMark is the window start up to which windows may retire at the
// global watermark global: every window ending at or before it qualifies.
func (s *Service) retireMark(global int64) int64 {
	return window.StartMs(global - s.store.Grace() - s.store.Horizon())
}

// retirePass is the wall-clock retirement pass over the owned partitions:
// the global watermark and their checkpoints are read once for all (a
// round trip each), and only a partition that has windows to retire goes
// on, so an idle windower asks Redis twice a pass, not twice a partition.
func (s *Service) retirePass(ctx context.Context, owned []int) error {
	global, err := s.store.GlobalWatermark(ctx, s.cfg.Partitions)
	if err != nil {
		return err
	}
	mark := s.retireMark(global)
	if mark <= 0 {
		return nil
	}
	cks, err := s.store.Checkpoints(ctx, owned)
	if err != nil {
		return err
	}
	for i, p := range owned {
		if mark <= cks[i].Retired {
			continue
		}
		err := s.retireAt(ctx, p, mark)
		if errors.Is(err, ledger.ErrFenced) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("retirement pass failed", "partition", p, "err", err)
		}
	}
	return nil
}

// retireAt is retire with the mark of a global watermark already read.
func (s *Service) retireAt(ctx context.Context, p int, mark int64) error {
	mu, _ := s.retiring.LoadOrStore(p, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if mark <= 0 {
		return nil
	}
	ck, err := s.store.Checkpoint(ctx, p)
	if err != nil {
		return err
	}
	if mark <= ck.Retired {
		return nil
	}
	ids, err := s.store.Windows(ctx, p)
	if err != nil {
		return err
	}
	// The windows old enough (ids are oldest first): only their partials
	// are read, and none when there are none.
	var old []string
	for _, id := range ids {
		start, err := window.ParseID(id)
		if err != nil {
			return err
		}
		if start+window.WidthMs > mark {
			break
		}
		old = append(old, id)
	}
	var retire []string
	if len(old) > 0 {
		kv, err := s.js.KeyValue(ctx, s.cfg.Names.Bucket())
		if err != nil {
			return fmt.Errorf("windower: bucket: %w", err)
		}
		// Every partition's current partials of these windows: the KV
		// snapshot must already include each of them, or a change another
		// partition made would be lost once this partition's partial is
		// gone.
		views := make([]map[string]int64, s.cfg.Partitions)
		for q := 0; q < s.cfg.Partitions; q++ {
			v, err := s.store.Read(ctx, q, old)
			if err != nil {
				return err
			}
			views[q] = map[string]int64{}
			for id, part := range v.Partials {
				views[q][id] = part.Version
			}
		}
		for _, id := range old {
			final, err := publishedFinal(ctx, kv, id, views)
			if err != nil {
				return err
			}
			if !final {
				start, _ := window.ParseID(id)
				mark = start // retire up to this window, not beyond
				break
			}
			retire = append(retire, id)
		}
	}
	if mark <= ck.Retired {
		return nil
	}
	removed, err := s.store.Retire(ctx, p, mark, retire)
	if err != nil {
		return s.fenced(p, err)
	}
	s.m.retired.Add(float64(len(retire)))
	s.cfg.Logger.Info("windows retired", "partition", p, "windows", len(retire), "ledger_entries", removed,
		"retired_until", window.Time(mark))
	return nil
}

// publishedFinal reports whether KV holds window id as final with every
// partition's partial that Redis still holds at its current version: only
// then has the publisher nothing left to read from the window's state.
func publishedFinal(ctx context.Context, kv jetstream.KeyValue, id string, views []map[string]int64) (bool, error) {
	e, err := kv.Get(ctx, wire.WindowKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("windower: read snapshot %s: %w", id, err)
	}
	var w wire.Window
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		return false, fmt.Errorf("windower: snapshot %s: %w", id, err)
	}
	if w.Status != window.StatusFinal {
		return false, nil
	}
	inKV := map[int]int64{}
	for _, part := range w.Partitions {
		inKV[part.Partition] = part.Version
	}
	for q, v := range views {
		if ver, ok := v[id]; ok && inKV[q] != ver {
			return false, nil
		}
	}
	return true, nil
}
