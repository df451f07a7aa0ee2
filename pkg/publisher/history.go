package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// History (docs/history.md): the publisher keeps one rollup per UTC day
// (wire.Day under wire.DayKey) next to the hourly snapshots, and prunes
// snapshots and rollups that fell behind the newest window by more than
// their retention. Nothing here reads the wall clock to decide: the head
// is the newest window in the bucket, a window is pruned only when it is
// final and every partition retired its state (so no later event can
// re-create it, and the windower's retire pass never waits on it), and a
// day's rollup has folded in the last snapshot of each hour before any of
// them is pruned.

type storedDay struct {
	rev uint64
	day wire.Day
}

// retentions returns cfg's window and day retentions with their defaults,
// raised to what pruning can honour: a window is pruned only after its
// state is retired, grace + replay horizon after its end.
func retentions(cfg Config, store *ledger.Store) (time.Duration, time.Duration) {
	win, day := cfg.WindowRetention, cfg.DayRetention
	if win <= 0 {
		win = config.DefaultWindowRetention
	}
	if day <= 0 {
		day = config.DefaultDayRetention
	}
	var horizon time.Duration
	if store != nil {
		horizon = time.Duration(store.Horizon()) * time.Millisecond
	}
	win = max(win, cfg.Grace+horizon)
	return win, max(day, win)
}

// retiredMark is the retired mark every partition reached: the state of
// each window ending at or before it is gone everywhere.
func retiredMark(views []*ledger.PartitionView) int64 {
	if len(views) == 0 {
		return 0
	}
	m := views[0].Retired
	for _, v := range views[1:] {
		m = min(m, v.Retired)
	}
	return m
}

// stateGone reports whether every partition retired window id's state
// (none holds a partial, and each one's retired mark is at or past the
// window's end).
func stateGone(id string, views []*ledger.PartitionView, retired int64) (bool, error) {
	start, err := window.ParseID(id)
	if err != nil {
		return false, err
	}
	if retired <= 0 || start+window.WidthMs > retired {
		return false, nil
	}
	for _, v := range views {
		if _, ok := v.Partials[id]; ok {
			return false, nil
		}
	}
	return true, nil
}

// rollupDay returns cur with the hours of snaps (all of cur's day) folded
// in, each hour replaced only by a newer version, and final set once the
// global watermark passed the day's end plus grace with every hour final.
// It never moves an hour or the day's finality backwards, so the result's
// Version is at least cur's.
func rollupDay(cur wire.Day, snaps []wire.Window, global int64, grace time.Duration) wire.Day {
	next := cur
	next.Hours = maps.Clone(cur.Hours)
	if next.Hours == nil {
		next.Hours = map[string]wire.DayHour{}
	}
	for _, w := range snaps {
		h := wire.HourKey(w.WindowID)
		if old, ok := next.Hours[h]; ok && old.Version >= w.Version {
			continue
		}
		next.Hours[h] = wire.DayHour{Count: w.Count, Corrections: w.Corrections, LateDropped: w.LateDropped,
			Version: w.Version, Status: w.Status, AmountCents: w.AmountCents, Unpriced: w.Unpriced}
	}
	if !next.Final && global != window.NoWatermark && global >= window.Ms(next.End)+grace.Milliseconds() {
		final := true
		for _, h := range next.Hours {
			final = final && h.Status == window.StatusFinal
		}
		next.Final = final
	}
	next.Total()
	return next
}

// sameDay reports whether two rollups hold the same hours and finality
// (what is compared before a write; updated_at is not).
func sameDay(a, b wire.Day) bool {
	return a.Final == b.Final && a.Generation == b.Generation && reflect.DeepEqual(a.Hours, b.Hours)
}

// rollupLocked folds snaps into their days' rollups and re-judges the
// finality of every non-final day it knows, writing only the rollups that
// changed, each by a revision compare-and-set.
func (s *Service) rollupLocked(ctx context.Context, snaps []wire.Window, global int64, now time.Time) error {
	byDay := map[string][]wire.Window{}
	for _, w := range snaps {
		d, err := wire.DayOf(w.WindowID)
		if err != nil {
			return err
		}
		byDay[d] = append(byDay[d], w)
	}
	for d, st := range s.days {
		if _, ok := byDay[d]; !ok && !st.day.Final {
			byDay[d] = nil
		}
	}
	for _, d := range slices.Sorted(maps.Keys(byDay)) {
		if err := s.writeDayLocked(ctx, d, byDay[d], global, now); err != nil {
			return err
		}
	}
	return nil
}

// dayInFlight is a day rollup sent by rollupAhead, awaiting its answer.
type dayInFlight struct {
	day  string
	next wire.Day
	f    jetstream.PubAckFuture
}

// rollupAhead sends, while a batch's window snapshots are still on their
// way, the rollups of the days whose stored revision this publisher
// knows, folded from snaps: the snapshots as they will be once stored.
// That is what rollupLocked would write once they are, one round trip
// later. settleRollups takes the answers; a lost race, or a window put
// that fails, leaves the day to rollupLocked, which then finds it stored
// or writes it, so the batch's rollups cost no round trip of their own.
func (s *Service) rollupAhead(snaps []wire.Window, global int64, now time.Time) ([]dayInFlight, error) {
	byDay := map[string][]wire.Window{}
	for _, w := range snaps {
		d, err := wire.DayOf(w.WindowID)
		if err != nil {
			return nil, err
		}
		byDay[d] = append(byDay[d], w)
	}
	var out []dayInFlight
	for _, d := range slices.Sorted(maps.Keys(byDay)) {
		cur, ok := s.days[d]
		if !ok {
			continue // first sight: rollupLocked reads it first
		}
		next := rollupDay(cur.day, byDay[d], global, s.cfg.Grace)
		next.Generation = s.cfg.Names.Generation
		if sameDay(next, cur.day) {
			continue
		}
		next.UpdatedAt = now
		body, err := json.Marshal(&next)
		if err != nil {
			return out, err
		}
		msg := nats.NewMsg(s.kvPrefix + wire.DayKey(d))
		msg.Data = body
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(cur.rev, 10))
		f, err := s.js.PublishMsgAsync(msg)
		if err != nil {
			return out, fmt.Errorf("publisher: put %s: %w", wire.DayKey(d), err)
		}
		out = append(out, dayInFlight{day: d, next: next, f: f})
	}
	return out, nil
}

// settleRollups takes the answers of rollupAhead's puts: a stored one is
// the day's new revision, a lost race forgets the day (rollupLocked reads
// it again).
func (s *Service) settleRollups(ctx context.Context, ahead []dayInFlight) error {
	for _, a := range ahead {
		select {
		case ack := <-a.f.Ok():
			s.days[a.day] = storedDay{rev: ack.Sequence, day: a.next}
			s.m.dayWrites.Inc()
		case err := <-a.f.Err():
			if !revisionConflict(err) {
				return fmt.Errorf("publisher: put %s: %w", wire.DayKey(a.day), err)
			}
			delete(s.days, a.day)
			s.m.conflicts.Inc()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// writeDayLocked folds snaps into day d's rollup as the bucket holds it
// and stores the result if it changed; a lost race re-reads and folds
// again.
func (s *Service) writeDayLocked(ctx context.Context, d string, snaps []wire.Window, global int64, now time.Time) error {
	key := wire.DayKey(d)
	for attempt := 0; attempt < 5; attempt++ {
		cur, ok := s.days[d]
		if !ok {
			e, err := s.kv.Get(ctx, key)
			switch {
			case err == nil:
				if err := json.Unmarshal(e.Value(), &cur.day); err != nil {
					return fmt.Errorf("publisher: stored %s is not a day rollup: %w", key, err)
				}
				cur.rev, ok = e.Revision(), true
			case errors.Is(err, jetstream.ErrKeyNotFound):
				if len(snaps) == 0 {
					return nil
				}
				start, err := wire.ParseDay(d)
				if err != nil {
					return err
				}
				cur.day = wire.Day{Day: d, Start: start, End: start.Add(24 * time.Hour), Generation: s.cfg.Names.Generation}
			default:
				return fmt.Errorf("publisher: get %s: %w", key, err)
			}
		}
		next := rollupDay(cur.day, snaps, global, s.cfg.Grace)
		next.Generation = s.cfg.Names.Generation
		if ok && sameDay(next, cur.day) {
			s.days[d] = cur
			return nil
		}
		next.UpdatedAt = now
		body, err := json.Marshal(&next)
		if err != nil {
			return err
		}
		rev, err := s.putCAS(ctx, key, body, cur.rev, ok)
		if err == nil {
			s.days[d] = storedDay{rev: rev, day: next}
			s.m.dayWrites.Inc()
			return nil
		}
		if revisionConflict(err) {
			delete(s.days, d)
			s.m.conflicts.Inc()
			continue
		}
		return fmt.Errorf("publisher: put %s: %w", key, err)
	}
	return fmt.Errorf("publisher: put %s: too many compare-and-set conflicts", key)
}

// listed is one key of the bucket as the history pass found it.
type listed struct {
	rev  uint64
	body []byte
}

// list returns the current entries of the bucket's keys under prefix.
func list(ctx context.Context, kv jetstream.KeyValue, prefix string) (map[string]listed, error) {
	w, err := kv.Watch(ctx, prefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("publisher: list %s*: %w", prefix, err)
	}
	defer w.Stop()
	out := map[string]listed{}
	for {
		select {
		case e, open := <-w.Updates():
			if !open {
				return nil, fmt.Errorf("publisher: list %s*: watcher closed", prefix)
			}
			if e == nil {
				return out, nil
			}
			out[strings.TrimPrefix(e.Key(), prefix)] = listed{rev: e.Revision(), body: e.Value()}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// history runs one history pass: every window snapshot in the bucket is
// folded into its day's rollup (so a rollup catches up with snapshots
// another publisher, or this one before a crash, wrote), the days'
// finality is re-judged, then windows and days beyond their retention are
// pruned. Safe to call twice and from several publishers: every write is a
// compare-and-set, and a replay of the same bucket changes nothing.
func (s *Service) history(ctx context.Context) error {
	wins, err := list(ctx, s.kv, wire.WindowKeyPrefix)
	if err != nil {
		return err
	}
	days, err := list(ctx, s.kv, wire.DayKeyPrefix)
	if err != nil {
		return err
	}
	views, err := s.store.ReadAll(ctx, s.parts, nil)
	if err != nil {
		return err
	}
	global, retired := globalWatermark(views), retiredMark(views)
	snaps := make([]wire.Window, 0, len(wins))
	revs := map[string]uint64{}
	head := int64(-1) // end of the newest window in the bucket
	for id, e := range wins {
		var w wire.Window
		if err := json.Unmarshal(e.body, &w); err != nil {
			return fmt.Errorf("publisher: stored %s is not a snapshot: %w", wire.WindowKey(id), err)
		}
		if w.WindowID != id {
			return fmt.Errorf("publisher: stored %s holds window %q", wire.WindowKey(id), w.WindowID)
		}
		snaps = append(snaps, w)
		revs[id] = e.rev
		head = max(head, window.Ms(w.End))
	}
	slices.SortFunc(snaps, func(a, b wire.Window) int { return strings.Compare(a.WindowID, b.WindowID) })

	s.mu.Lock()
	defer s.mu.Unlock()
	// Days listed but not cached (after a restart, or written by another
	// publisher) are judged too: their finality may be due although no
	// hour changed, and pruning needs them.
	var extra []string
	for d := range days {
		if _, ok := s.days[d]; !ok {
			extra = append(extra, d)
		}
	}
	slices.Sort(extra)
	if err := s.rollupLocked(ctx, snaps, global, s.cfg.Now().UTC()); err != nil {
		return err
	}
	for _, d := range extra {
		if _, ok := s.days[d]; ok {
			continue
		}
		if err := s.writeDayLocked(ctx, d, nil, global, s.cfg.Now().UTC()); err != nil {
			return err
		}
	}
	if s.cfg.KeepHistory || head < 0 {
		return nil
	}
	prunedWindows, prunedDays := 0, 0
	left := map[string]bool{} // days that still have a window snapshot
	winCut := head - s.cfg.WindowRetention.Milliseconds()
	for _, w := range snaps {
		d, _ := wire.DayOf(w.WindowID)
		end := window.Ms(w.End)
		hour, rolled := s.days[d].day.Hours[wire.HourKey(w.WindowID)]
		if end > winCut || w.Status != window.StatusFinal || end > retired || !rolled || hour.Version < w.Version {
			left[d] = true
			continue
		}
		// The window's explain records go first: a crash between the two
		// leaves a window that the next pass prunes, never a record that
		// no pass would find again.
		if err := s.store.Forget(ctx, s.parts, w.WindowID); err != nil {
			return err
		}
		err := s.kv.Purge(ctx, wire.WindowKey(w.WindowID), jetstream.LastRevision(revs[w.WindowID]))
		if revisionConflict(err) {
			left[d] = true // rewritten meanwhile: judged again next pass
			s.m.conflicts.Inc()
			continue
		}
		if err != nil {
			return fmt.Errorf("publisher: prune %s: %w", wire.WindowKey(w.WindowID), err)
		}
		delete(s.stored, w.WindowID)
		delete(s.known, w.WindowID)
		prunedWindows++
	}
	dayCut := head - s.cfg.DayRetention.Milliseconds()
	for _, d := range slices.Sorted(maps.Keys(s.days)) {
		st := s.days[d]
		if left[d] || !st.day.Final || window.Ms(st.day.End) > dayCut {
			continue
		}
		err := s.kv.Purge(ctx, wire.DayKey(d), jetstream.LastRevision(st.rev))
		if revisionConflict(err) {
			delete(s.days, d)
			s.m.conflicts.Inc()
			continue
		}
		if err != nil {
			return fmt.Errorf("publisher: prune %s: %w", wire.DayKey(d), err)
		}
		delete(s.days, d)
		prunedDays++
	}
	if prunedWindows+prunedDays == 0 {
		return nil
	}
	s.m.pruned.WithLabelValues("window").Add(float64(prunedWindows))
	s.m.pruned.WithLabelValues("day").Add(float64(prunedDays))
	s.cfg.Logger.Info("history pruned", "windows", prunedWindows, "days", prunedDays,
		"head", window.Time(head), "window_retention", s.cfg.WindowRetention.String(), "day_retention", s.cfg.DayRetention.String())
	// Each purge leaves its marker (a header-only message per pruned key).
	// Removing markers needs the stream purge API, which the publisher's
	// least-privilege user is refused on purpose (deploy/nats/auth.conf);
	// docs/history.md says how an operator reclaims them.
	return nil
}
