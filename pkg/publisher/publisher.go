// Package publisher is the publisher service: CHANGES → KV snapshots.
//
// It wakes up on change notices, coalesces a burst of them, reads every
// partition's watermark and partials atomically per partition, merges them
// into window snapshots and writes each one to the KV bucket only if its
// version is newer than the stored one (a revision compare-and-set), so
// replays and several publishers never move a window backwards.
package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/internal/digest"
	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config configures a publisher instance.
type Config struct {
	Names      wire.Names
	Partitions int
	Grace      time.Duration
	// StaleAfter: with no source message for this long, non-final windows
	// are published as stale (default 2m).
	StaleAfter time.Duration
	// Tick is how often health and staleness are refreshed (default 1s).
	Tick time.Duration
	// KeepAlive: a meta.* key whose content did not change is written
	// again after this long, so that readers can tell a live publisher
	// (meta.health's updated_at) from a gone one; a changed key is written
	// at the next Tick. Default 30s, and at most a quarter of StaleAfter
	// (readers judge the publisher gone after StaleAfter).
	KeepAlive time.Duration
	// Linger is how long a batch of change notices waits for more after
	// its first (default 5ms; config.Waits.PublishLinger).
	Linger     time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Failpoints *failpoint.Set
	Now        func() time.Time
	// WindowRetention: a window snapshot whose end is more than this
	// (event time) behind the newest window in the bucket is pruned, once
	// it is final and every partition retired its state; its day rollup
	// keeps its counts (default config.DefaultWindowRetention; never less
	// than Grace plus the store's replay horizon).
	WindowRetention time.Duration
	// DayRetention is the same for day rollups (default
	// config.DefaultDayRetention; never less than WindowRetention).
	DayRetention time.Duration
	// KeepHistory turns pruning off (a bounded run's bucket is its
	// record: its artifacts and parity need every window). Rollups are
	// still kept.
	KeepHistory bool
	// HistoryEvery is how often the history pass (rollups of every
	// snapshot in the bucket, day finality, pruning) runs (default 30s).
	HistoryEvery time.Duration
}

// withDefaults returns c with its zero fields set to their defaults (the
// retentions, which depend on the store, are set by New).
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 2 * time.Minute
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 30 * time.Second
	}
	c.KeepAlive = min(c.KeepAlive, c.StaleAfter/4)
	if c.HistoryEvery <= 0 {
		c.HistoryEvery = 30 * time.Second
	}
	if c.Linger <= 0 {
		c.Linger = 5 * time.Millisecond
	}
	return c
}

// Service is one publisher instance.
type Service struct {
	js    jetstream.JetStream
	store *ledger.Store
	cfg   Config
	m     *metrics

	mu     sync.Mutex
	kv     jetstream.KeyValue
	stored map[string]stored // by window id: what the bucket holds
	known  map[string]bool   // window ids seen in any partition
	wms    []int64           // last known partition watermarks
	parts  []int             // 0..Partitions-1
	// kvPrefix is the subject prefix of the bucket's keys ("$KV.<bucket>."),
	// for compare-and-set writes published asynchronously.
	kvPrefix string
	stale    bool
	started  time.Time
	// meta is what writeHealth last wrote under each meta.* key.
	meta map[string]metaWritten
	// days is what the bucket holds under each day key, by day id.
	days map[string]storedDay
	// ctrl is the control bucket and active the generation its pointer
	// last named ("" until read), for meta.generation (tick only).
	ctrl   jetstream.KeyValue
	active string
	// rejected is the tally of REJECTED by reason (rejected.go).
	rejected rejectedTally
	// hc is what the health tick keeps between ticks (health.go).
	hc healthCache
	// wake is signalled by every batch of change notices: a quiet
	// pipeline's slow health ticks go back to Tick (nextTick).
	wake chan struct{}
}

type metaWritten struct {
	body []byte // the content compared (meta.health without updated_at)
	at   time.Time
}

type stored struct {
	rev  uint64
	snap wire.Window
}

// New returns a publisher reading store and writing js's KV bucket.
func New(js jetstream.JetStream, store *ledger.Store, cfg Config) *Service {
	cfg = cfg.withDefaults()
	cfg.WindowRetention, cfg.DayRetention = retentions(cfg, store)
	parts := make([]int, cfg.Partitions)
	for p := range parts {
		parts[p] = p
	}
	return &Service{js: js, store: store, cfg: cfg, m: newMetrics(cfg.Registerer),
		stored: map[string]stored{}, known: map[string]bool{}, wms: make([]int64, cfg.Partitions),
		parts: parts, kvPrefix: "$KV." + cfg.Names.Bucket() + ".", meta: map[string]metaWritten{},
		days: map[string]storedDay{}, wake: make(chan struct{}, 1)}
}

func (s *Service) durable() string {
	return s.cfg.Names.ServiceDurable("publisher", -1)
}

// Run publishes until ctx ends (nil) or a failure (its error).
func (s *Service) Run(ctx context.Context) error {
	// A cluster without a leader for now is waited out, not a failure.
	var kv jetstream.KeyValue
	err := connect.WaitFor(ctx, func(ctx context.Context) error {
		var err error
		kv, err = s.js.KeyValue(ctx, s.cfg.Names.Bucket())
		return err
	}, func(attempt int, err error, next time.Duration) {
		s.cfg.Logger.Warn("publisher: waiting for the bucket", "bucket", s.cfg.Names.Bucket(), "attempt", attempt, "err", err, "retry_in", next.Round(time.Millisecond).String())
	})
	if err != nil {
		return fmt.Errorf("publisher: bucket %s: %w", s.cfg.Names.Bucket(), err)
	}
	s.kv = kv
	s.started = s.cfg.Now()
	spec := stream.ConsumerSpec{
		Stream:  s.cfg.Names.Stream(wire.Changes),
		Durable: s.durable(),
		Filter:  s.cfg.Names.Wildcard(wire.Changes),
	}
	if _, err := stream.Open(ctx, s.js, spec); err != nil {
		return err
	}
	// Everything Redis holds is published once at start; the consumer was
	// opened first (the loop finds it where it is), so no change made
	// meanwhile is missed.
	if err := s.resync(ctx); err != nil {
		return err
	}
	if err := s.history(ctx); err != nil {
		s.cfg.Logger.Warn("publisher history pass failed", "err", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		// The history pass has its own loop, so a long one never holds
		// the health reports back.
		defer wg.Done()
		h := time.NewTicker(s.cfg.HistoryEvery)
		defer h.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-h.C:
				hctx, cancel := context.WithTimeout(ctx, max(s.cfg.HistoryEvery, time.Minute))
				if err := s.history(hctx); err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("publisher history pass failed", "err", err)
				}
				cancel()
			}
		}
	}()
	go func() {
		defer wg.Done()
		t := time.NewTimer(s.cfg.Tick)
		defer t.Stop()
		slow := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				if slow {
					slow = false
					t.Reset(s.cfg.Tick)
				}
				continue
			case <-t.C:
			}
			// Bounded, so a request lost in a server restart does not
			// hold health reports back for the client's default timeout.
			tctx, cancel := context.WithTimeout(ctx, max(s.cfg.Tick, time.Second))
			err := s.tick(tctx)
			cancel()
			next := s.cfg.Tick
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("publisher tick failed", "err", err)
			} else if err == nil {
				next = s.nextTick()
			}
			slow = next > s.cfg.Tick
			t.Reset(next)
		}
	}()
	err = stream.Consume(ctx, s.js, spec, stream.BatchConfig{Max: 2000, Linger: s.cfg.Linger, Logger: s.cfg.Logger}, s.handle)
	cancel(err)
	wg.Wait()
	return err
}

// handle publishes the windows a batch of change notices names; the
// consume loop acks the notices once it returned nil (each one: the
// consumer acks explicitly) and terminates the bad ones.
func (s *Service) handle(ctx context.Context, batch []jetstream.Msg) (stream.Outcome, error) {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if md, err := batch[0].Metadata(); err == nil && !md.Timestamp.IsZero() {
		s.m.step.Since(stepWait, md.Timestamp)
	}
	dirty := map[string]bool{}
	wmMoved := false
	out := stream.Outcome{TermReason: "bad change notice"}
	for i, m := range batch {
		var c wire.Change
		if err := json.Unmarshal(m.Data(), &c); err != nil || c.Partition < 0 || c.Partition >= s.cfg.Partitions {
			// A notice is only a wake-up; a bad one is logged and dropped
			// for good (the periodic resync covers what it may have meant).
			s.cfg.Logger.Warn("publisher: bad change notice", "subject", m.Subject(), "err", err)
			out.Term = append(out.Term, i)
			continue
		}
		for _, w := range c.Windows {
			dirty[w] = true
		}
		// Every notice may carry a watermark move. s.wms is what the last
		// read saw, which can already include this move, so comparing with
		// it would miss it: re-judge the non-final windows on every notice
		// (they are few).
		wmMoved = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if wmMoved {
		for id := range s.known {
			if st, ok := s.stored[id]; !ok || st.snap.Status != window.StatusFinal {
				dirty[id] = true
			}
		}
	}
	if err := s.publishSteps(ctx, keys(dirty), s.m.step); err != nil {
		return stream.Outcome{}, err
	}
	if err := s.cfg.Failpoints.Hit(failpoint.PublisherAfterPut); err != nil {
		return stream.Outcome{}, err
	}
	return out, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// resync publishes every window any partition holds.
func (s *Service) resync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := map[string]bool{}
	for p := 0; p < s.cfg.Partitions; p++ {
		ids, err := s.store.Windows(ctx, p)
		if err != nil {
			return err
		}
		for _, id := range ids {
			all[id] = true
		}
	}
	return s.publishLocked(ctx, keys(all))
}

// publishLocked reads ids from every partition (one pipeline), merges them
// and writes the snapshots that changed. A window whose stored revision is
// known is written by an asynchronous compare-and-set publish, all of them
// in flight at once; the others (first sight, or a lost race) go through
// writeLocked, which reads the stored snapshot first.
func (s *Service) publishLocked(ctx context.Context, ids []string) error {
	return s.publishSteps(ctx, ids, nil)
}

// publishSteps is publishLocked, timing its steps into steps if it is set
// (a batch of change notices; not the resync or the periodic passes).
func (s *Service) publishSteps(ctx context.Context, ids []string, steps *telemetry.Steps) error {
	reading := time.Now()
	views, err := s.store.ReadAll(ctx, s.parts, ids)
	if err != nil {
		return err
	}
	putting := steps.Since(stepRead, reading)
	for p, v := range views {
		s.wms[p] = v.Watermark
	}
	global := globalWatermark(views)
	retired := retiredMark(views)
	now := s.cfg.Now().UTC()
	type inFlight struct {
		snap wire.Window
		f    jetstream.PubAckFuture
	}
	var sent []inFlight
	for _, id := range ids {
		if gone, err := stateGone(id, views, retired); err != nil {
			return err
		} else if gone {
			// Every partition retired the window's state: there is nothing
			// left to merge, and its final snapshot is in the bucket (or
			// was pruned, and must not come back as an empty window).
			continue
		}
		s.known[id] = true
		snap, err := s.merge(id, views, global, now)
		if err != nil {
			return err
		}
		cur, ok := s.stored[id]
		if !ok {
			if err := s.writeLocked(ctx, snap); err != nil {
				return err
			}
			continue
		}
		snap, write := s.decide(snap, cur, true)
		if !write {
			continue
		}
		body, err := json.Marshal(&snap)
		if err != nil {
			return err
		}
		msg := nats.NewMsg(s.kvPrefix + wire.WindowKey(id))
		msg.Data = body
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(cur.rev, 10))
		f, err := s.js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("publisher: put %s: %w", wire.WindowKey(id), err)
		}
		sent = append(sent, inFlight{snap: snap, f: f})
	}
	// The day rollups go out beside the window snapshots, folded from
	// them as they will be stored (rollupAhead).
	ahead := make([]wire.Window, 0, len(ids))
	pending := make(map[string]wire.Window, len(sent))
	for _, w := range sent {
		pending[w.snap.WindowID] = w.snap
	}
	for _, id := range ids {
		if snap, ok := pending[id]; ok {
			ahead = append(ahead, snap)
		} else if st, ok := s.stored[id]; ok {
			ahead = append(ahead, st.snap)
		}
	}
	days, err := s.rollupAhead(ahead, global, now)
	if err != nil {
		return err
	}
	var retry []wire.Window
	for _, w := range sent {
		select {
		case ack := <-w.f.Ok():
			s.stored[w.snap.WindowID] = stored{rev: ack.Sequence, snap: w.snap}
			s.m.writes.Inc()
		case err := <-w.f.Err():
			if !revisionConflict(err) {
				return fmt.Errorf("publisher: put %s: %w", wire.WindowKey(w.snap.WindowID), err)
			}
			// Another writer got there first: decide again from what it
			// stored.
			delete(s.stored, w.snap.WindowID)
			s.m.conflicts.Inc()
			retry = append(retry, w.snap)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := s.settleRollups(ctx, days); err != nil {
		return err
	}
	for _, snap := range retry {
		if err := s.writeLocked(ctx, snap); err != nil {
			return err
		}
	}
	rolling := steps.Since(stepPut, putting)
	// The day rollups follow the snapshots as stored (written now or
	// before: a rollup is a function of its hours' last snapshots). Those
	// rollupAhead stored are found unchanged here; this writes the rest:
	// days seen for the first time, lost races, finality.
	snaps := make([]wire.Window, 0, len(ids))
	for _, id := range ids {
		if st, ok := s.stored[id]; ok {
			snaps = append(snaps, st.snap)
		}
	}
	if err := s.rollupLocked(ctx, snaps, global, now); err != nil {
		return err
	}
	steps.Since(stepRollup, rolling)
	return nil
}

// revisionConflict reports a compare-and-set that lost: the bucket's
// revision of the key was not the expected one (code 10071, or 10164 from
// a replicated stream).
func revisionConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// decide compares snap with what the bucket holds (cur, when ok) and
// returns snap as it must be stored (its first output version carried
// over) and whether it must be written: only a newer version, or the same
// version with another staleness (a final snapshot is never made stale).
func (s *Service) decide(snap wire.Window, cur stored, ok bool) (wire.Window, bool) {
	if ok {
		if snap.Version < cur.snap.Version {
			s.m.skipped.Inc()
			return snap, false
		}
		if snap.Version == cur.snap.Version && (snap.Stale == cur.snap.Stale || snap.Status == window.StatusFinal) {
			return snap, false
		}
		if cur.snap.FirstOutputVersion > 0 {
			snap.FirstOutputVersion = cur.snap.FirstOutputVersion
		}
	}
	if snap.FirstOutputVersion == 0 && snap.Status != window.StatusOpen {
		snap.FirstOutputVersion = snap.Version
	}
	return snap, true
}

func globalWatermark(views []*ledger.PartitionView) int64 {
	g := int64(-1)
	for _, v := range views {
		if g < 0 || v.Watermark < g {
			g = v.Watermark
		}
	}
	if g < 0 {
		return window.NoWatermark
	}
	return g
}

// merge builds the snapshot of window id from the partition views.
func (s *Service) merge(id string, views []*ledger.PartitionView, global int64, now time.Time) (wire.Window, error) {
	start, err := window.ParseID(id)
	if err != nil {
		return wire.Window{}, err
	}
	end := start + window.WidthMs
	w := wire.Window{
		WindowID: id, Start: window.Time(start), End: window.Time(end),
		Watermark: window.Time(global), UpdatedAt: now, Generation: s.cfg.Names.Generation,
		Partitions: []wire.Partial{},
	}
	var d digest.Digest
	stores := map[string]wire.StoreTotal{}
	for _, v := range views {
		p, ok := v.Partials[id]
		if !ok {
			continue
		}
		for _, st := range p.Stores {
			wire.AddStore(stores, st) // a hot key's store is in several partitions
		}
		w.Count += p.Count
		w.Corrections += p.Corrections
		w.LateDropped += p.LateDropped
		w.Version += p.Version
		d.Merge(p.Digest)
		w.Partitions = append(w.Partitions, p)
	}
	w.Digest = d.String()
	w.Breakdown = wire.NewBreakdown(stores)
	w.Status = window.StatusOf(global, end, s.cfg.Grace.Milliseconds())
	w.Version += w.Status.Ordinal()
	if w.Status != window.StatusFinal {
		w.Stale = s.stale
	}
	return w, nil
}

// putCAS writes body under key by revision compare-and-set: an update of
// revision rev when the key exists, else a create, so a writer that lost
// a race gets a conflict (revisionConflict) instead of overwriting.
func (s *Service) putCAS(ctx context.Context, key string, body []byte, rev uint64, exists bool) (uint64, error) {
	if exists {
		return s.kv.Update(ctx, key, body, rev)
	}
	return s.kv.Create(ctx, key, body)
}

// writeLocked stores snap if it is newer than what the bucket holds, by a
// revision compare-and-set; a lost race re-reads and decides again.
func (s *Service) writeLocked(ctx context.Context, snap wire.Window) error {
	key := wire.WindowKey(snap.WindowID)
	for attempt := 0; attempt < 5; attempt++ {
		cur, ok := s.stored[snap.WindowID]
		if !ok {
			e, err := s.kv.Get(ctx, key)
			switch {
			case err == nil:
				if err := json.Unmarshal(e.Value(), &cur.snap); err != nil {
					return fmt.Errorf("publisher: stored %s is not a snapshot: %w", key, err)
				}
				cur.rev = e.Revision()
				ok = true
				s.stored[snap.WindowID] = cur
			case errors.Is(err, jetstream.ErrKeyNotFound):
			default:
				return fmt.Errorf("publisher: get %s: %w", key, err)
			}
		}
		snap, write := s.decide(snap, cur, ok)
		if !write {
			return nil
		}
		body, err := json.Marshal(&snap)
		if err != nil {
			return err
		}
		rev, err := s.putCAS(ctx, key, body, cur.rev, ok)
		if err == nil {
			s.stored[snap.WindowID] = stored{rev: rev, snap: snap}
			s.m.writes.Inc()
			return nil
		}
		if revisionConflict(err) {
			// Another writer got there first: forget our view and retry.
			delete(s.stored, snap.WindowID)
			s.m.conflicts.Inc()
			continue
		}
		return fmt.Errorf("publisher: put %s: %w", key, err)
	}
	return fmt.Errorf("publisher: put %s: too many compare-and-set conflicts", key)
}
