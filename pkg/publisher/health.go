package publisher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"
	"weak"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// recentWindow is the span of the per-minute health figures.
const recentWindow = time.Minute

// healthSample is one tick's running totals.
type healthSample struct {
	at          time.Time
	late        uint64
	corrections int64
	counted     []int64 // by partition, over the windows published
}

// recentTotals keeps the samples of the last minute of one publisher.
type recentTotals struct {
	mu      sync.Mutex
	samples []healthSample
}

// recents holds each publisher instance's recentTotals; an entry goes
// away with its instance (the key is weak, removed by a cleanup).
var recents sync.Map // weak.Pointer[Service] -> *recentTotals

func recentOf(s *Service) *recentTotals {
	key := weak.Make(s)
	if v, ok := recents.Load(key); ok {
		return v.(*recentTotals)
	}
	v, loaded := recents.LoadOrStore(key, &recentTotals{})
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[Service]) { recents.Delete(k) }, key)
	}
	return v.(*recentTotals)
}

// add records cur and returns the baseline to subtract: the newest sample
// at least recentWindow old, else the oldest one kept.
func (r *recentTotals) add(cur healthSample) healthSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, cur)
	cut := cur.at.Add(-recentWindow)
	for len(r.samples) > 1 && !r.samples[1].at.After(cut) {
		r.samples = r.samples[1:]
	}
	return r.samples[0]
}

// recentFigures fills the per-minute fields of h from cur and its baseline.
func recentFigures(h *wire.Health, cur, base healthSample) {
	if cur.late > base.late {
		h.LateLastMinute = cur.late - base.late
	}
	h.CorrectionsLastMinute = max(cur.corrections-base.corrections, 0)
	h.PartitionRecent = make([]int64, len(cur.counted))
	for p, n := range cur.counted {
		if p < len(base.counted) {
			n -= base.counted[p]
		}
		h.PartitionRecent[p] = max(n, 0)
	}
	h.Hottest = []wire.PartitionHeat{}
	for p, n := range h.PartitionRecent {
		if n > 0 {
			h.Hottest = append(h.Hottest, wire.PartitionHeat{Partition: p, Recent: n})
		}
	}
	sort.SliceStable(h.Hottest, func(i, j int) bool { return h.Hottest[i].Recent > h.Hottest[j].Recent })
	if len(h.Hottest) > 3 {
		h.Hottest = h.Hottest[:3]
	}
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
	cur := healthSample{at: h.UpdatedAt, late: h.LateTotal, counted: make([]int64, s.cfg.Partitions)}
	for _, st := range s.stored {
		cur.corrections += st.snap.Corrections
		for _, part := range st.snap.Partitions {
			if part.Partition >= 0 && part.Partition < len(cur.counted) {
				cur.counted[part.Partition] += part.Count
			}
		}
	}
	s.mu.Unlock()
	h.Corrections = cur.corrections
	recentFigures(h, cur, recentOf(s).add(cur))
	// A failed count leaves the last tally in the report; the next tick
	// goes on from the stored one.
	if r, err := s.countRejected(ctx); err == nil {
		h.Rejected = r
	} else {
		s.cfg.Logger.Warn("publisher: counting REJECTED failed", "err", err)
		h.Rejected = s.lastRejected()
	}
	return s.writeHealth(ctx, h)
}

// healthCache is what the health tick keeps from one tick to the next, so
// that a quiet pipeline costs the servers little: the stream handles (a
// lookup is a STREAM.INFO request), and the backlogs last listed with the
// streams' last sequences they were listed at.
type healthCache struct {
	mu      sync.Mutex
	streams map[string]jetstream.Stream
	// backlog is the consumers' backlog last listed, at RAW's last
	// sequence rawLast; listed is when.
	backlog map[string]uint64
	rawLast uint64
	listed  time.Time
	// correction is the correction backlog last listed, at LATE's last
	// sequence lateLast; lateListed is when.
	correction           uint64
	lateLast             uint64
	lateListed           time.Time
	backlogKnown, lateOK bool
	// quiet: the last tick found nothing in flight (quietBacklog). LATE
	// and REJECTED grow only from records in flight, so a quiet tick
	// takes their figures from a read less than relistEvery old
	// (lateTotal, lateRead; the tally's counted) instead of asking.
	quiet     bool
	lateTotal uint64
	lateRead  time.Time
	// idle: the last report found RAW where the one before it did and
	// every backlog zero; rawSeen is RAW's last sequence it saw, staleIn
	// how long until the source turns stale (< 0: stale already).
	idle    bool
	rawSeen uint64
	staleIn time.Duration
}

// quietTicks is how many Ticks apart the health reports of an idle
// pipeline are (nextTick).
const quietTicks = 5

// nextTick is the wait before the next health report: Tick while anything
// is in flight, quietTicks Ticks once a report found the pipeline idle —
// but no longer than KeepAlive, nor past the moment the source turns
// stale, so that both are still told within a Tick. A change notice ends
// the slow wait (Service.wake).
func (s *Service) nextTick() time.Duration {
	s.hc.mu.Lock()
	idle, staleIn := s.hc.idle, s.hc.staleIn
	s.hc.mu.Unlock()
	if !idle {
		return s.cfg.Tick
	}
	d := min(quietTicks*s.cfg.Tick, s.cfg.KeepAlive)
	if staleIn >= 0 {
		d = min(d, staleIn+time.Millisecond) // just past the moment
	}
	return max(d, s.cfg.Tick)
}

// settled reports whether output figures read at last are still true: the
// pipeline is quiet and they are less than relistEvery old.
func (s *Service) settled(last time.Time) bool {
	s.hc.mu.Lock()
	defer s.hc.mu.Unlock()
	return s.hc.settledLocked(last)
}

// settledLocked is settled with hc.mu held.
func (hc *healthCache) settledLocked(last time.Time) bool {
	return hc.quiet && !last.IsZero() && time.Since(last) < relistEvery
}

// relistEvery bounds how long a quiet pipeline's backlogs are taken from
// the last listing.
const relistEvery = 10 * time.Second

// stream is the handle of stream name, looked up once.
func (s *Service) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s.hc.mu.Lock()
	st, ok := s.hc.streams[name]
	s.hc.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	s.hc.mu.Lock()
	if s.hc.streams == nil {
		s.hc.streams = map[string]jetstream.Stream{}
	}
	s.hc.streams[name] = st
	s.hc.mu.Unlock()
	return st, nil
}

// forget drops the handle of stream name after an error through it.
func (s *Service) forget(name string) {
	s.hc.mu.Lock()
	delete(s.hc.streams, name)
	s.hc.mu.Unlock()
}

// quietBacklog is the backlog last listed when nothing can have changed
// it since: RAW holds no new message, every backlog was zero (a consumer
// with nothing pending and nothing unacknowledged stays so until its
// stream grows, and VALID and CHANGES grow from RAW) and the listing is
// less than relistEvery old.
func (s *Service) quietBacklog(rawLast uint64) (map[string]uint64, bool) {
	s.hc.mu.Lock()
	defer s.hc.mu.Unlock()
	if !s.hc.backlogKnown || rawLast != s.hc.rawLast || time.Since(s.hc.listed) >= relistEvery {
		return nil, false
	}
	for _, n := range s.hc.backlog {
		if n != 0 {
			return nil, false
		}
	}
	return maps.Clone(s.hc.backlog), true
}

// health gathers the pipeline health (watermarks, backlog, state size,
// source freshness).
func (s *Service) health(ctx context.Context) (*wire.Health, error) {
	now := s.cfg.Now().UTC()
	h := &wire.Health{UpdatedAt: now, Backlog: map[string]uint64{}, StaleAfter: s.cfg.StaleAfter.String(), Generation: s.cfg.Names.Generation,
		Grace: s.cfg.Grace.String()}
	global := int64(-1)
	live := map[string]bool{}
	states, err := s.store.States(ctx, s.cfg.Partitions)
	if err != nil {
		return nil, err
	}
	for p, state := range states {
		ck := state.Checkpoint
		h.Watermarks = append(h.Watermarks, window.Time(ck.Watermark))
		h.LedgerEntries += ck.Entries
		if global < 0 || ck.Watermark < global {
			global = ck.Watermark
		}
		h.Windows += int(state.Windows)
		ps := wire.PartitionSources{Partition: p, Sources: make([]wire.SourceState, len(state.Sources))}
		for i, st := range state.Sources {
			ps.Sources[i] = wire.SourceState{ID: st.ID, Progress: window.Time(st.Progress), LastSeen: window.Time(st.Last), Live: st.Live}
			if st.Live {
				live[st.ID] = true
			}
		}
		h.Sources = append(h.Sources, ps)
	}
	h.LiveSources = len(live)
	s.m.liveSources.Set(float64(h.LiveSources))
	h.GlobalWatermark = window.Time(max(global, 0))
	for p, wm := range h.Watermarks {
		if d := wm.Sub(now).Milliseconds(); d > 0 {
			h.AheadPartitions = append(h.AheadPartitions, p)
			h.WatermarkAheadMs = max(h.WatermarkAheadMs, d)
		}
	}
	sort.Ints(h.AheadPartitions)
	s.m.ahead.Set(float64(h.WatermarkAheadMs) / 1000)
	raw, err := s.stream(ctx, wire.Raw)
	if err != nil {
		return nil, fmt.Errorf("publisher: stream RAW: %w", err)
	}
	info, err := raw.Info(ctx)
	if err != nil {
		s.forget(wire.Raw)
		return nil, fmt.Errorf("publisher: stream RAW info: %w", err)
	}
	h.SourceLastSeen = info.State.LastTime.UTC()
	last := h.SourceLastSeen
	if info.State.Msgs == 0 {
		last = s.started // nothing sent yet: judge from our own start
	}
	h.Stale = now.Sub(last) > s.cfg.StaleAfter
	s.m.observeSource(h)
	b, quiet := s.quietBacklog(info.State.LastSeq)
	if quiet {
		h.Backlog = b
	} else if err := s.listBacklog(ctx, h, info.State.LastSeq); err != nil {
		return nil, err
	}
	idle := true
	for _, n := range h.Backlog {
		idle = idle && n == 0
	}
	s.hc.mu.Lock()
	s.hc.quiet = quiet
	s.hc.idle = idle && info.State.LastSeq == s.hc.rawSeen
	s.hc.rawSeen = info.State.LastSeq
	s.hc.staleIn = last.Add(s.cfg.StaleAfter).Sub(now)
	s.hc.mu.Unlock()
	s.lateFigures(ctx, h)
	return h, nil
}

// listBacklog lists the consumers of RAW, VALID and CHANGES into
// h.Backlog, and keeps it as seen at RAW's last sequence rawLast.
func (s *Service) listBacklog(ctx context.Context, h *wire.Health, rawLast uint64) error {
	for _, base := range []string{wire.Raw, wire.Valid, wire.Changes} {
		name := s.cfg.Names.Stream(base)
		st, err := s.stream(ctx, name)
		if err != nil {
			return err
		}
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			// The pipeline's durables only: a replay's or a report's
			// ordered consumer left on RAW is not the pipeline's backlog.
			if !s.cfg.Names.OwnsConsumer(ci.Name) {
				continue
			}
			h.Backlog[ci.Name] = ci.NumPending + uint64(ci.NumAckPending)
		}
		if err := lister.Err(); err != nil {
			s.forget(name)
			return fmt.Errorf("publisher: list consumers of %s: %w", base, err)
		}
	}
	s.hc.mu.Lock()
	s.hc.backlog, s.hc.rawLast, s.hc.listed, s.hc.backlogKnown = maps.Clone(h.Backlog), rawLast, time.Now(), true
	s.hc.mu.Unlock()
	return nil
}

// lateFigures sets LATE's total and the correction backlog in h: the
// backlog listed again only when LATE grew or relistEvery passed.
func (s *Service) lateFigures(ctx context.Context, h *wire.Health) {
	s.hc.mu.Lock()
	cached := s.hc.lateOK && s.hc.settledLocked(s.hc.lateRead)
	total, backlog := s.hc.lateTotal, s.hc.correction
	s.hc.mu.Unlock()
	if cached {
		h.LateTotal, h.CorrectionBacklog = total, backlog
		return
	}
	name := s.cfg.Names.Stream(wire.Late)
	late, err := s.stream(ctx, name)
	if err != nil {
		return
	}
	li, err := late.Info(ctx)
	if err != nil {
		s.forget(name)
		h.CorrectionBacklog = correctionBacklog(ctx, late, h.LateTotal)
		return
	}
	h.LateTotal = li.State.Msgs
	s.hc.mu.Lock()
	quiet := s.hc.lateOK && li.State.LastSeq == s.hc.lateLast && time.Since(s.hc.lateListed) < relistEvery
	backlog = s.hc.correction
	s.hc.lateTotal, s.hc.lateRead = li.State.Msgs, time.Now()
	s.hc.mu.Unlock()
	if quiet {
		h.CorrectionBacklog = backlog
		return
	}
	h.CorrectionBacklog = correctionBacklog(ctx, late, h.LateTotal)
	s.hc.mu.Lock()
	s.hc.correction, s.hc.lateLast, s.hc.lateListed, s.hc.lateOK = h.CorrectionBacklog, li.State.LastSeq, time.Now(), true
	s.hc.mu.Unlock()
}

// correctionBacklog is the number of LATE messages awaiting offline
// recomputation: the largest backlog of a durable consumer of LATE (the
// recomputation job), or all of them (total) when there is none.
func correctionBacklog(ctx context.Context, late jetstream.Stream, total uint64) uint64 {
	lister := late.ListConsumers(ctx)
	found := false
	var worst uint64
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue // an ephemeral reader (a report), not the recomputation
		}
		found = true
		worst = max(worst, ci.NumPending+uint64(ci.NumAckPending))
	}
	if lister.Err() != nil || !found {
		return total
	}
	return worst
}

// writeHealth writes h under meta.health and its parts under the other
// meta.* keys: each when its content changed since it was last written, or
// when it was last written KeepAlive ago. Watchers of the bucket see a
// meta.* update when something changed, not every Tick.
func (s *Service) writeHealth(ctx context.Context, h *wire.Health) error {
	wm := map[string]any{"global": h.GlobalWatermark, "partitions": map[string]time.Time{},
		"ahead_of_clock_ms": h.WatermarkAheadMs}
	for p, w := range h.Watermarks {
		wm["partitions"].(map[string]time.Time)[strconv.Itoa(p)] = w
	}
	undated := *h
	undated.UpdatedAt = time.Time{}
	for _, kv := range []struct {
		key       string
		v, differ any // written, compared
	}{
		{wire.HealthKey, h, &undated},
		{"meta.watermark", wm, nil},
		{"meta.backlog", h.Backlog, nil},
		{"meta.state", map[string]any{"ledger_entries": h.LedgerEntries, "windows": h.Windows}, nil},
		{"meta.late", map[string]any{"total": h.LateTotal, "per_minute": h.LateLastMinute}, nil},
		{"meta.corrections", map[string]any{"total": h.Corrections, "per_minute": h.CorrectionsLastMinute, "backlog": h.CorrectionBacklog}, nil},
		{"meta.source", map[string]any{"last_seen": h.SourceLastSeen, "stale": h.Stale, "stale_after": h.StaleAfter}, nil},
		{"meta.sources", map[string]any{"live": h.LiveSources, "partitions": h.Sources}, nil},
		{wire.ActiveKey, wire.MetaOf(h.Generation, s.activeGeneration(ctx)), nil},
	} {
		if kv.key == wire.ActiveKey && s.active == "" {
			continue // the pointer was never read: say nothing rather than guess
		}
		b, err := json.Marshal(kv.v)
		if err != nil {
			return err
		}
		cmp := b
		if kv.differ != nil {
			if cmp, err = json.Marshal(kv.differ); err != nil {
				return err
			}
		}
		last, ok := s.meta[kv.key]
		if ok && bytes.Equal(last.body, cmp) && h.UpdatedAt.Sub(last.at) < s.cfg.KeepAlive {
			continue
		}
		if _, err := s.kv.Put(ctx, kv.key, b); err != nil {
			return fmt.Errorf("publisher: put %s: %w", kv.key, err)
		}
		s.meta[kv.key] = metaWritten{body: cmp, at: h.UpdatedAt}
	}
	return nil
}

// activeGeneration reads the active-generation pointer (wire.ControlBucket,
// key wire.ActiveKey; absent: wire.DefaultGeneration). When it cannot be
// read it returns the last generation read, "" if none. Called from the
// tick only.
func (s *Service) activeGeneration(ctx context.Context) string {
	if s.ctrl == nil {
		kv, err := s.js.KeyValue(ctx, wire.ControlBucket)
		if err != nil {
			return s.active
		}
		s.ctrl = kv
	}
	e, err := s.ctrl.Get(ctx, wire.ActiveKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		s.active = wire.DefaultGeneration
	case err == nil:
		var p wire.Pointer
		if json.Unmarshal(e.Value(), &p) == nil && p.Generation != "" {
			s.active = p.Generation
		}
	}
	return s.active
}
