package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// board follows a generation's KV bucket and renders it as a table.
type board struct {
	mu      sync.Mutex
	windows map[string]wire.Window
	health  *wire.Health
	changed bool
}

// follow watches kv until ctx ends; the watcher is re-created if it stops
// (a KV watcher ends when the server restarts).
func (b *board) follow(ctx context.Context, kv jetstream.KeyValue) error {
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			b.apply(e)
		}
		w.Stop()
	}
	return nil
}

func (b *board) apply(e jetstream.KeyValueEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case strings.HasPrefix(e.Key(), wire.WindowKeyPrefix):
		var s wire.Window
		if json.Unmarshal(e.Value(), &s) == nil {
			b.windows[s.WindowID] = s
			b.changed = true
		}
	case e.Key() == wire.HealthKey:
		var h wire.Health
		if json.Unmarshal(e.Value(), &h) == nil {
			if b.health == nil || b.health.Stale != h.Stale {
				b.changed = true
			}
			b.health = &h
		}
	}
}

// render writes the table if anything changed since the last call (or
// always when force is set). It returns whether it wrote.
func (b *board) render(w io.Writer, limit int, force bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.changed && !force {
		return false
	}
	b.changed = false
	ids := make([]string, 0, len(b.windows))
	for id := range b.windows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[len(ids)-limit:]
	}
	stale := b.health != nil && b.health.Stale
	fmt.Fprintf(w, "\n== receiptflow windows at %s", time.Now().UTC().Format("15:04:05Z"))
	if b.health != nil {
		fmt.Fprintf(w, "  global watermark %s", b.health.GlobalWatermark.Format("2006-01-02T15:04Z"))
	}
	fmt.Fprintln(w)
	if stale {
		fmt.Fprintf(w, "!! STALE: the source has sent nothing since %s (stale after %s); provisional counts may be incomplete\n",
			b.health.SourceLastSeen.Format(time.RFC3339), b.health.StaleAfter)
	}
	fmt.Fprintf(w, "%-14s %7s %7s %-9s %6s %6s %-17s %s\n", "WINDOW", "COUNT", "VERSION", "STATUS", "CORR", "LATE", "WATERMARK", "NOTE")
	for _, id := range ids {
		s := b.windows[id]
		var note []string
		if s.Status == "final" {
			note = append(note, "final")
		} else {
			note = append(note, "provisional")
		}
		if s.Corrections > 0 {
			note = append(note, fmt.Sprintf("corrected +%d", s.Corrections))
		}
		if s.Stale {
			note = append(note, "STALE")
		}
		fmt.Fprintf(w, "%-14s %7d %7d %-9s %6d %6d %-17s %s\n", s.WindowID, s.Count, s.Version, s.Status,
			s.Corrections, s.LateDropped, s.Watermark.Format("2006-01-02T15:04Z"), strings.Join(note, ", "))
	}
	return true
}

func openBoard(ctx context.Context, js jetstream.JetStream, gen string) (*board, error) {
	kv, err := js.KeyValue(ctx, wire.For(gen).Bucket())
	if err != nil {
		return nil, err
	}
	b := &board{windows: map[string]wire.Window{}}
	go b.follow(ctx, kv)
	return b, nil
}
