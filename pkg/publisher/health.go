package publisher

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Health is the pipeline health the publisher writes under meta.* keys.
type Health struct {
	UpdatedAt time.Time `json:"updated_at"`
	// GlobalWatermark is the minimum of the partition watermarks.
	GlobalWatermark time.Time `json:"global_watermark"`
	// Watermarks by partition.
	Watermarks []time.Time `json:"watermarks"`
	// Backlog is each consumer's unprocessed messages (pending + unacked).
	Backlog map[string]uint64 `json:"backlog"`
	// LedgerEntries and Windows are the state size held in Redis.
	LedgerEntries int64 `json:"ledger_entries"`
	Windows       int   `json:"windows"`
	// LateTotal is the number of messages in LATE; Corrections the sum of
	// corrections over the windows published.
	LateTotal   uint64 `json:"late_total"`
	Corrections int64  `json:"corrections"`
	// SourceLastSeen is the time of the newest RAW message; Stale is true
	// when it is older than StaleAfter.
	SourceLastSeen time.Time `json:"source_last_seen"`
	Stale          bool      `json:"stale"`
	StaleAfter     string    `json:"stale_after"`
	Generation     string    `json:"generation"`
}

// tick refreshes staleness and health. When staleness flips, every
// non-final window is rewritten with its new stale flag (same version).
func (s *Service) tick(ctx context.Context) error {
	h, err := s.health(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	flipped := h.Stale != s.stale
	s.stale = h.Stale
	if flipped {
		var ids []string
		for id, st := range s.stored {
			if st.snap.Status != window.StatusFinal {
				ids = append(ids, id)
			}
		}
		if err := s.publishLocked(ctx, ids); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	var corr int64
	for _, st := range s.stored {
		corr += st.snap.Corrections
	}
	s.mu.Unlock()
	h.Corrections = corr
	return s.writeHealth(ctx, h)
}

// health gathers the pipeline health (watermarks, backlog, state size,
// source freshness).
func (s *Service) health(ctx context.Context) (*Health, error) {
	now := s.cfg.Now().UTC()
	h := &Health{UpdatedAt: now, Backlog: map[string]uint64{}, StaleAfter: s.cfg.StaleAfter.String(), Generation: s.cfg.Names.Generation}
	global := int64(-1)
	for p := 0; p < s.cfg.Partitions; p++ {
		ck, err := s.store.Checkpoint(ctx, p)
		if err != nil {
			return nil, err
		}
		h.Watermarks = append(h.Watermarks, window.Time(ck.Watermark))
		h.LedgerEntries += ck.Entries
		if global < 0 || ck.Watermark < global {
			global = ck.Watermark
		}
		ids, err := s.store.Windows(ctx, p)
		if err != nil {
			return nil, err
		}
		h.Windows += len(ids)
	}
	h.GlobalWatermark = window.Time(max(global, 0))
	raw, err := s.js.Stream(ctx, stream.Raw)
	if err != nil {
		return nil, fmt.Errorf("publisher: stream RAW: %w", err)
	}
	info, err := raw.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("publisher: stream RAW info: %w", err)
	}
	h.SourceLastSeen = info.State.LastTime.UTC()
	last := h.SourceLastSeen
	if info.State.Msgs == 0 {
		last = s.started // nothing sent yet: judge from our own start
	}
	h.Stale = now.Sub(last) > s.cfg.StaleAfter
	for _, base := range []string{stream.Raw, stream.Valid, stream.Changes} {
		st, err := s.js.Stream(ctx, s.cfg.Names.Stream(base))
		if err != nil {
			return nil, err
		}
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			h.Backlog[ci.Name] = ci.NumPending + uint64(ci.NumAckPending)
		}
		if err := lister.Err(); err != nil {
			return nil, fmt.Errorf("publisher: list consumers of %s: %w", base, err)
		}
	}
	late, err := s.js.Stream(ctx, s.cfg.Names.Stream(stream.Late))
	if err == nil {
		if li, err := late.Info(ctx); err == nil {
			h.LateTotal = li.State.Msgs
		}
	}
	return h, nil
}

func (s *Service) writeHealth(ctx context.Context, h *Health) error {
	put := func(key string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := s.kv.Put(ctx, key, b); err != nil {
			return fmt.Errorf("publisher: put %s: %w", key, err)
		}
		return nil
	}
	wm := map[string]any{"global": h.GlobalWatermark, "partitions": map[string]time.Time{}}
	for p, w := range h.Watermarks {
		wm["partitions"].(map[string]time.Time)[strconv.Itoa(p)] = w
	}
	for key, v := range map[string]any{
		"meta.health":      h,
		"meta.watermark":   wm,
		"meta.backlog":     h.Backlog,
		"meta.state":       map[string]any{"ledger_entries": h.LedgerEntries, "windows": h.Windows},
		"meta.late":        map[string]any{"total": h.LateTotal},
		"meta.corrections": map[string]any{"total": h.Corrections},
		"meta.source":      map[string]any{"last_seen": h.SourceLastSeen, "stale": h.Stale, "stale_after": h.StaleAfter},
		"meta.generation":  map[string]any{"generation": h.Generation},
	} {
		if err := put(key, v); err != nil {
			return err
		}
	}
	return nil
}
