package validator

// The publication barrier (docs/spec.md §2): between copies of one event_id
// with different content, in any partitions, the copy with the lowest RAW
// sequence is the event, whatever order the validator instances see them
// in. Partitions are consumed independently, so a copy in partition A may be
// read long before a lower copy in partition B; the claims alone
// (ledger.Claims: the lowest sequence holds the id) would then correct the
// verdict only after A had already published its copy to VALID.
//
// So a partition publishes a batch only once every other partition has
// claimed everything it holds below the batch's claims:
//
//  1. Each partition records its claim progress in Redis (ledger.Claimed):
//     after a batch's claims, the batch's last RAW sequence (one pipeline
//     with the claims: ledger.ClaimThrough); and while its consumer is idle
//     (nothing pending, nothing unacknowledged), the RAW stream's last
//     sequence read before it looked (idleProgress). A batch is claimed
//     as soon as it is fetched, ahead of the publication of the batch
//     before it (ahead.go), so the others do not wait for a whole cycle.
//  2. A batch whose highest claimed sequence is S may publish once every
//     other partition's progress is at least S-1. A progress counts
//     further than its mark where RAW's layout shows that the partition
//     holds nothing past the mark (spans, below). If the progress read
//     just before the batch's claims already says so, the claims' verdicts
//     are final (every lower copy had claimed before them): no extra round
//     trip. Otherwise the partition waits (woken by this instance's own
//     partitions, polling Redis for the others), then reads the takeover
//     count kept beside the progress (ledger.ClaimsUnmoved): unchanged
//     since its claims, no claim moved and the verdicts stand. Else (or
//     on a cluster, which counts none) it reads the batch's claims again
//     (ledger.ClaimConflicts): a copy whose id a lower copy with other
//     content took over meanwhile becomes conflicting_duplicate.
//
// Spans. Ingest stores a replicated RAW in atomic batches (a one-replica
// RAW in chained runs, which have no spans), each
// stored whole at consecutive sequences, and marks each batch's commit
// message with where every partition's messages of the batch end
// (wire.HdrBatchLasts). A validator that reads a commit knows the batch's
// span: first..last, and each partition's last sequence in it (none for a
// partition absent from it). A partition that has claimed through e, with
// e+1 inside a span and its own last message of the span at or below e,
// holds nothing unclaimed up to the span's end: its progress counts as
// the span's last, and so on across adjacent spans. Without this, a batch
// ending late in an ingest batch waited for every other partition to
// claim a batch of the next one (the partitions whose messages of the
// ingest batch ended earlier could not show more progress), a whole
// ingest cycle. The spans are facts of RAW, not of Redis: they extend what
// the claims say, never replace it, and a regression of Redis is found
// as before. Only spans the instance's own partitions read are known;
// anything else (a plain publish, a heartbeat source of its own) breaks
// the chain, and the partition waits for its claims as before.
//
// The price of the rule: a partition that no validator runs stalls every
// other partition's valid events (heartbeats and rejections still flow).
// A waiting partition logs which partition it waits for and exports it in
// receiptflow_validator_barrier_waiting{partition,waiting_for}: 1 while
// it waits for that partition, else 0.
//
// One partition must have one running validator instance (Config.Owned
// splits them); two sharing one durable would mark each other's progress.
// The barrier is part of the live loop (Run): handle called without it
// (Process, for receiptctl replay, which re-drives RAW ranges the live
// validators judged already and finds their claims) only claims.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/internal/telemetry"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

const (
	// defaultIdleEvery is how often an idle partition's progress is
	// advanced (Config.IdleEvery).
	defaultIdleEvery = 50 * time.Millisecond
	// defaultBarrierPoll is how often a waiting partition reads the
	// progress of partitions other instances run (Config.BarrierPoll);
	// partitions of its own instance wake it as they advance.
	defaultBarrierPoll = 20 * time.Millisecond
	// localPoll bounds the wait for a partition of this instance between
	// wake-ups (a safety net: its marks wake the waiters).
	localPoll = 500 * time.Millisecond
	// stallWarn is how long a partition waits before it logs which
	// partition holds it up, and then how often it logs again.
	stallWarn = 10 * time.Second
	// idleSlow is how often a quiet partition's idle progress looks, once
	// nothing moved for idleFastFor: RAW's last sequence unchanged, no
	// batch handled here and no partition of this instance waiting for it.
	idleSlow    = checkEvery / 2
	idleFastFor = 2 * time.Second
	// floorEvery is how often the idle check reads the consumer's ack
	// floor after its first.
	floorEvery = 30 * time.Second
)

// barrier is one validator instance's view of the claim progress.
type barrier struct {
	// live: the instance runs its partitions (Run), so the barrier applies.
	live atomic.Bool

	mu     sync.Mutex
	known  ledger.Claimed    // highest progress seen, per partition
	local  map[int]bool      // partitions this instance runs
	wake   chan struct{}     // closed (and replaced) when known rises
	active map[int]time.Time // when each local partition last handled a batch
	// rawLast is RAW's last sequence and prog every partition's claim
	// progress, as the idle checks last read them.
	rawLast shared[uint64]
	prog    shared[ledger.Claimed]
	// floor is, per local partition, the claim progress it last saw
	// written (its own marks, or its consumer's ack floor at start):
	// Redis holding less lost writes (regress.go).
	floor   map[int]uint64
	reclaim map[int]*sync.Mutex // one claims rebuild at a time per partition
	// nudges wake a local partition's idle progress at once: a partition
	// of this instance waits for it.
	nudges map[int]chan struct{}

	// spans are the RAW batches known stored whole, by first sequence
	// (disjoint); at most spanKeep.
	spans []rawSpan

	waiting *prometheus.GaugeVec
	// waitingFor is waiting's former shape, the partition waited for as
	// the value (-1: none); exported for one release (CHANGELOG.md).
	waitingFor *prometheus.GaugeVec
	waited     *prometheus.CounterVec
	rechecks   prometheus.Counter
	unmoved    prometheus.Counter
}

func newBarrier(reg prometheus.Registerer) *barrier {
	b := &barrier{
		known:   ledger.Claimed{},
		local:   map[int]bool{},
		active:  map[int]time.Time{},
		floor:   map[int]uint64{},
		reclaim: map[int]*sync.Mutex{},
		nudges:  map[int]chan struct{}{},
		wake:    make(chan struct{}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "receiptflow_validator_barrier_waiting",
			Help: "1 while RAW partition partition waits for the claims of partition waiting_for before it publishes, else 0.",
		}, []string{"partition", "waiting_for"}),
		waitingFor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "receiptflow_validator_barrier_waiting_for",
			Help: "Deprecated: use receiptflow_validator_barrier_waiting{partition,waiting_for}; this metric is removed in the next release (CHANGELOG.md). The RAW partition whose claims this partition waits for before it publishes (-1: not waiting).",
		}, []string{"partition"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "receiptflow_validator_barrier_wait_seconds_total",
			Help: "Time a partition waited for the other partitions' claims before publishing.",
		}, []string{"partition"}),
		rechecks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_validator_barrier_rechecks_total",
			Help: "Batches whose claims were read again after waiting for other partitions.",
		}),
		unmoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "receiptflow_validator_barrier_unmoved_total",
			Help: "Batches that waited for other partitions and kept their verdicts without reading their claims again: no claim was taken over meanwhile.",
		}),
	}
	b.waiting = telemetry.Register(reg, b.waiting)
	b.waitingFor = telemetry.Register(reg, b.waitingFor)
	b.waited = telemetry.Register(reg, b.waited)
	b.rechecks = telemetry.Register(reg, b.rechecks)
	b.unmoved = telemetry.Register(reg, b.unmoved)
	return b
}

// observe raises known by a progress read from Redis and wakes the
// waiters if it rose.
func (b *barrier) observe(pr ledger.Claimed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rose := false
	for p, seq := range pr {
		if seq > b.known[p] {
			b.known[p], rose = seq, true
		}
	}
	if rose {
		close(b.wake)
		b.wake = make(chan struct{})
	}
}

// raise records a mark of local partition p and wakes the waiters.
func (b *barrier) raise(p int, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq <= b.known[p] {
		return
	}
	b.known[p] = seq
	close(b.wake)
	b.wake = make(chan struct{})
}

// reset replaces known by a progress read from Redis, lower values
// included: after Redis lost writes, what was seen before is no longer
// true, and a waiter must not pass on it.
func (b *barrier) reset(pr ledger.Claimed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known = ledger.Claimed{}
	for p, seq := range pr {
		b.known[p] = seq
	}
}

// floorOf is the claim progress local partition p last saw written.
func (b *barrier) floorOf(p int) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.floor[p]
}

// setFloor raises local partition p's floor to seq.
func (b *barrier) setFloor(p int, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.floor[p] = max(b.floor[p], seq)
}

// nudge wakes local partition q's idle progress, if it runs.
func (b *barrier) nudge(q int) {
	b.mu.Lock()
	c := b.nudges[q]
	b.mu.Unlock()
	if c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// busy records that local partition p is handling a batch.
func (b *barrier) busy(p int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active[p] = time.Now()
}

// spanKeep bounds the spans a barrier remembers.
const spanKeep = 4096

// rawSpan is a RAW batch stored whole at first..last; lasts holds the
// sequence of each partition's last message in it (absent: none).
type rawSpan struct {
	first, last uint64
	lasts       map[int]uint64
}

// addSpan records sp and wakes the waiters if it is new. Spans no
// partition's known progress needs any more are dropped, and the oldest
// beyond spanKeep.
func (b *barrier) addSpan(sp rawSpan, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, found := slices.BinarySearchFunc(b.spans, sp.first, func(x rawSpan, first uint64) int { return cmp.Compare(x.first, first) })
	switch {
	case found && b.spans[i].last == sp.last:
		return
	case found || (i > 0 && b.spans[i-1].last >= sp.first) || (i < len(b.spans) && b.spans[i].first <= sp.last):
		// Batches of one RAW never overlap: RAW's sequences were used
		// again (the stream was recreated or went back), and what was
		// known of the old ones is no longer true.
		b.spans = []rawSpan{sp}
	default:
		b.spans = slices.Insert(b.spans, i, sp)
	}
	low := uint64(0)
	for q := 0; q < n; q++ {
		if q == 0 || b.known[q] < low {
			low = b.known[q]
		}
	}
	drop := 0
	for drop < len(b.spans) && (b.spans[drop].last <= low || len(b.spans)-drop > spanKeep) {
		drop++
	}
	b.spans = b.spans[drop:]
	close(b.wake)
	b.wake = make(chan struct{})
}

// extendLocked is partition q's progress given that it has claimed
// through e: e, carried over every following span in which q's messages
// end at or below it. b.mu is held.
func (b *barrier) extendLocked(q int, e uint64) uint64 {
	for {
		// The span holding e+1: the last one starting at or before it.
		i, found := slices.BinarySearchFunc(b.spans, e+1, func(x rawSpan, seq uint64) int { return cmp.Compare(x.first, seq) })
		if !found {
			i--
		}
		if i < 0 || b.spans[i].last <= e {
			return e
		}
		sp := b.spans[i]
		if l, ok := sp.lasts[q]; ok && l > e {
			return e
		}
		e = sp.last
	}
}

// laggingLocked is the first partition other than p, of n, whose progress
// in pr (extended by the spans) is below target; ok is false when there
// is none. b.mu is held.
func (b *barrier) laggingLocked(pr ledger.Claimed, p, n int, target uint64) (q int, ok bool) {
	for q := 0; q < n; q++ {
		if q != p && pr[q] < target && b.extendLocked(q, pr[q]) < target {
			return q, true
		}
	}
	return 0, false
}

// lagging is laggingLocked for a caller not holding b.mu.
func (b *barrier) lagging(pr ledger.Claimed, p, n int, target uint64) (q int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.laggingLocked(pr, p, n, target)
}

// state returns the partition p waits for (or ok false), whether it is a
// local partition, and the channel closed at the next local rise.
func (b *barrier) state(p, n int, target uint64) (q int, ok, local bool, wake <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok = b.laggingLocked(b.known, p, n, target)
	return q, ok, b.local[q], b.wake
}

// noteSpans records the spans of the commits in a batch of RAW messages
// (wire.HdrBatchLasts). A commit whose header does not parse, or names a
// subject that is not one of RAW's partition subjects, is left out: its
// absent partitions could not be told from unknown ones.
func (s *Service) noteSpans(batch []jetstream.Msg) {
	for _, m := range batch {
		h := m.Headers()
		v := h[wire.HdrBatchLasts]
		if len(v) != 1 || h.Get(wire.HdrBatchCommit) != "1" {
			continue
		}
		n, err := strconv.Atoi(h.Get(wire.HdrBatchSeq))
		if err != nil || n < 1 {
			continue
		}
		meta, err := m.Metadata()
		if err != nil || meta.Sequence.Stream < uint64(n) {
			continue
		}
		lasts, err := wire.ParseBatchLasts(v[0], n)
		if err != nil {
			continue
		}
		sp := rawSpan{first: meta.Sequence.Stream - uint64(n) + 1, last: meta.Sequence.Stream, lasts: make(map[int]uint64, len(lasts))}
		for subj, pos := range lasts {
			q, ok := s.rawSubjects[subj]
			if !ok {
				sp.lasts = nil
				break
			}
			sp.lasts[q] = sp.first + uint64(pos) - 1
		}
		if sp.lasts != nil {
			s.bar.addSpan(sp, s.cfg.Partitions)
		}
	}
}

// claim claims a batch's valid records of partition p and returns which
// conflict (see the top of this file). claims are in RAW order. Claims
// that Redis lost are claimed again first (regress.go). first, if not
// nil, is the batch's claims already made (claimAhead).
func (s *Service) claim(ctx context.Context, p int, batch []jetstream.Msg, claims []ledger.Claim, first *claimRound) ([]bool, error) {
	if !s.bar.live.Load() {
		return s.store.Claims(ctx, claims)
	}
	for {
		r := first
		first = nil
		if r == nil {
			var err error
			if r, err = s.claimOnce(ctx, p, batch, claims); err != nil {
				return nil, err
			}
		}
		conflicts, final, err := s.settle(ctx, p, claims, r)
		if err != nil || final {
			return conflicts, err
		}
	}
}

// claimRound is a batch's claims as written: the verdicts, the progress
// read just before them, the batch's last RAW sequence and its highest
// claim.
type claimRound struct {
	conflicts        []bool
	before           ledger.Claimed
	through, highest uint64
	takeovers        uint64 // the takeover count after the claims, when counted
	counted          bool
}

// claimOnce writes a batch's claims and marks partition p's progress
// through the batch's last RAW sequence.
func (s *Service) claimOnce(ctx context.Context, p int, batch []jetstream.Msg, claims []ledger.Claim) (*claimRound, error) {
	r := &claimRound{}
	for _, c := range claims {
		r.highest = max(r.highest, c.Seq)
	}
	r.through = r.highest
	s.noteSpans(batch)
	if meta, err := batch[len(batch)-1].Metadata(); err == nil {
		r.through = max(r.through, meta.Sequence.Stream)
	}
	s.bar.busy(p)
	for {
		round, err := s.store.ClaimRound(ctx, p, claims, r.through, s.bar.floorOf(p))
		if err != nil {
			err = s.fenced(p, err)
		}
		if errors.Is(err, ledger.ErrClaimsRegressed) {
			if err := s.reclaim(ctx, p); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		r.conflicts, r.before = round.Conflicts, round.Before
		r.takeovers, r.counted = round.Takeovers, round.Counted
		s.bar.setFloor(p, r.through)
		s.bar.observe(r.before)
		s.bar.raise(p, r.through)
		return r, nil
	}
}

// settle waits until every other partition has claimed what it holds
// below the batch's highest claim, and returns the batch's final
// verdicts; final is false when Redis lost writes meanwhile and the batch
// must be claimed again.
func (s *Service) settle(ctx context.Context, p int, claims []ledger.Claim, r *claimRound) (conflicts []bool, final bool, err error) {
	if r.highest == 0 {
		return r.conflicts, true, nil
	}
	target := r.highest - 1
	if _, lag := s.bar.lagging(r.before, p, s.cfg.Partitions, target); !lag {
		return r.conflicts, true, nil
	}
	if err := s.waitClaimed(ctx, p, target); err != nil {
		return nil, false, err
	}
	settled := func(after ledger.Claimed) bool {
		_, lag := s.bar.lagging(after, p, s.cfg.Partitions, target)
		return !lag && after[p] >= r.through
	}
	if r.counted {
		// No claim taken over since this batch's claims: its verdicts
		// stand, and the claims need no second read.
		after, unmoved, err := s.store.ClaimsUnmoved(ctx, r.takeovers)
		if err != nil {
			return nil, false, err
		}
		if unmoved && settled(after) {
			s.bar.unmoved.Inc()
			return r.conflicts, true, nil
		}
	}
	s.bar.rechecks.Inc()
	conflicts, after, err := s.store.ClaimConflicts(ctx, claims)
	if err != nil {
		return nil, false, err
	}
	// The progress read after the claims must still say so, this
	// partition's own included: less means Redis lost writes since the
	// wait looked (then claim again from the top).
	if settled(after) {
		return conflicts, true, nil
	}
	s.bar.reset(after)
	return nil, false, nil
}

// waitClaimed waits until every partition but p has claimed through
// target, or ctx ends.
func (s *Service) waitClaimed(ctx context.Context, p int, target uint64) error {
	label := strconv.Itoa(p)
	start := time.Now()
	warned := start
	waitedFor := -1 // the partition the gauge says p waits for
	mark := func(q int) {
		if q == waitedFor {
			return
		}
		if waitedFor >= 0 {
			s.bar.waiting.WithLabelValues(label, strconv.Itoa(waitedFor)).Set(0)
		}
		if q >= 0 {
			s.bar.waiting.WithLabelValues(label, strconv.Itoa(q)).Set(1)
		}
		s.bar.waitingFor.WithLabelValues(label).Set(float64(q))
		waitedFor = q
	}
	defer func() {
		mark(-1)
		s.bar.waitingFor.WithLabelValues(label).Set(-1)
		s.bar.waited.WithLabelValues(label).Add(time.Since(start).Seconds())
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		q, lag, local, wake := s.bar.state(p, s.cfg.Partitions, target)
		if !lag {
			return nil
		}
		mark(q)
		if local {
			s.bar.nudge(q)
		}
		if time.Since(warned) >= stallWarn {
			warned = time.Now()
			s.cfg.Logger.Warn("validator partition waits for another partition's claims before publishing (is a validator running it?)",
				"partition", p, "waiting_for", q, "through", target, "waited", time.Since(start).Round(time.Second).String())
		}
		poll := s.cfg.BarrierPoll
		if local {
			poll = localPoll
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
			return fmt.Errorf("validator: partition %d waiting for partition %d's claims: %w", p, q, context.Cause(ctx))
		case <-wake:
		case <-timer.C:
			pr, err := s.store.ClaimProgress(ctx)
			if err != nil {
				return err
			}
			s.bar.observe(pr)
		}
	}
}

// shared is a value the instance's partitions read at most once per
// maxAge between them: partitions whose ticks fall together wait for one
// read.
type shared[T any] struct {
	read sync.Mutex // held by the partition reading
	mu   sync.Mutex
	val  T
	at   time.Time
}

// get returns the value read less than maxAge ago (0: read now), else
// reads it with fetch and keeps merge(old, new).
func (v *shared[T]) get(maxAge time.Duration, fetch func() (T, error), merge func(old, new T) T) (T, error) {
	cached := func() (T, bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.val, time.Since(v.at) < maxAge
	}
	if val, ok := cached(); ok {
		return val, nil
	}
	v.read.Lock()
	defer v.read.Unlock()
	if val, ok := cached(); ok {
		return val, nil
	}
	val, err := fetch()
	if err != nil {
		return val, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.val, v.at = merge(v.val, val), time.Now()
	return v.val, nil
}

// rawLast is RAW's last sequence, read at most once per maxAge for all
// the instance's partitions.
func (s *Service) rawLast(ctx context.Context, maxAge time.Duration) (uint64, error) {
	return s.bar.rawLast.get(maxAge, func() (uint64, error) {
		st, err := s.js.Stream(ctx, s.cfg.Names.Stream(wire.Raw))
		if err != nil {
			return 0, fmt.Errorf("validator: RAW info: %w", err)
		}
		return st.CachedInfo().State.LastSeq, nil
	}, func(old, last uint64) uint64 { return max(old, last) })
}

// trackIdle turns the barrier on for partition p (its consumer spec), and
// starts its idle progress; the returned stop ends it and waits for it. A
// mark refused for a later owner calls fence with ledger.ErrFenced.
func (s *Service) trackIdle(ctx context.Context, p int, spec stream.ConsumerSpec, fence context.CancelCauseFunc) (stop func()) {
	s.bar.mu.Lock()
	s.bar.local[p] = true
	if s.bar.reclaim[p] == nil {
		s.bar.reclaim[p] = &sync.Mutex{}
	}
	nudge := make(chan struct{}, 1)
	s.bar.nudges[p] = nudge
	s.bar.mu.Unlock()
	s.bar.live.Store(true)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.idleProgress(ctx, p, spec, fence, nudge)
	}()
	return func() {
		cancel()
		<-done
		s.bar.mu.Lock()
		if s.bar.nudges[p] == nudge {
			delete(s.bar.nudges, p)
		}
		s.bar.mu.Unlock()
	}
}

// slotBase is where alignedWait's slots begin.
var slotBase = time.Now()

// alignedWait is the time until the next multiple of d since slotBase:
// the quiet partitions of an instance wake at the same instants, one
// wake-up of the process per slow tick instead of one per partition.
func alignedWait(d time.Duration) time.Duration {
	return waitToSlot(time.Since(slotBase), d)
}

// waitToSlot is the wait from since (after slotBase) to the next multiple
// of d: in (0, d].
func waitToSlot(since, d time.Duration) time.Duration {
	return d - since%d
}

// idleProgress advances partition p's claim progress while its consumer
// has nothing to do, so that other partitions need not wait for a batch
// that will not come. RAW's last sequence L is read first; if the consumer
// then has nothing pending and nothing unacknowledged, every record of p
// up to L was processed (acknowledged after its claims), so p has claimed
// through L. The L used is the one read a tick before the consumer info:
// on a replicated stream the consumer's leader may be a moment behind the
// stream's, and a tick gives it the time to have stored what L covers.
// It looks every IdleEvery while anything moves (RAW grew, p handled a
// batch, or a partition of this instance waits for it: nudge), else every
// idleSlow, so that a quiet deployment costs next to nothing.
func (s *Service) idleProgress(ctx context.Context, p int, spec stream.ConsumerSpec, fence context.CancelCauseFunc, nudge <-chan struct{}) {
	t := time.NewTimer(s.cfg.IdleEvery)
	defer t.Stop()
	var prev, seen uint64
	checked := time.Now()
	var floorRead time.Time
	fastUntil := time.Now().Add(idleFastFor)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-nudge:
			fastUntil = time.Now().Add(idleFastFor)
		}
		s.bar.mu.Lock()
		since := time.Since(s.bar.active[p])
		s.bar.mu.Unlock()
		if since < idleFastFor {
			fastUntil = time.Now().Add(idleFastFor)
		}
		// A quiet partition takes a RAW info up to half its tick old, so
		// that the instance's quiet partitions share one.
		maxAge := s.cfg.IdleEvery / 2
		if time.Now().Before(fastUntil) {
			t.Reset(s.cfg.IdleEvery)
		} else {
			t.Reset(alignedWait(max(idleSlow, s.cfg.IdleEvery)))
			maxAge = max(idleSlow, s.cfg.IdleEvery) / 2
		}
		// Claims Redis lost are found here too, on a partition that has
		// nothing to process (regress.go).
		if time.Since(checked) >= checkEvery {
			checked = time.Now()
			// The consumer's ack floor only says more than this
			// instance's own marks when the partition was taken over:
			// read at the first check, then seldom.
			withFloor := time.Since(floorRead) >= floorEvery
			if withFloor {
				floorRead = time.Now()
			}
			if err := s.checkClaims(ctx, p, spec, withFloor, checkEvery/2); errors.Is(err, ledger.ErrFenced) {
				fence(err)
				return
			} else if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("claim progress check", "partition", p, "err", err)
			}
		}
		// A partition that handled a batch within the last tick marks its
		// progress itself: neither RAW's info nor its consumer's is needed
		// (a candidate read before it is still a safe one).
		if since < s.cfg.IdleEvery {
			continue
		}
		last, err := s.rawLast(ctx, maxAge)
		if err != nil {
			s.cfg.Logger.Debug("idle progress: RAW info", "partition", p, "err", err)
			continue
		}
		if last != seen {
			// (Reset drops a value the timer may have left: Go 1.23.)
			seen = last
			fastUntil = time.Now().Add(idleFastFor)
			t.Reset(s.cfg.IdleEvery)
		}
		cand := prev
		prev = last
		// Nothing to advance, or the partition handled a batch within the
		// last tick: it is busy and marks its progress itself, so the
		// consumer need not be asked.
		s.bar.mu.Lock()
		done := s.bar.known[p] >= cand || time.Since(s.bar.active[p]) < s.cfg.IdleEvery
		s.bar.mu.Unlock()
		if done {
			continue
		}
		// The consume loop opens (and after a gap re-creates) the
		// durable consumer; look it up by name each time (the lookup's
		// answer is the consumer's info, fresh from the server).
		cons, err := s.js.Consumer(ctx, spec.Stream, spec.Durable)
		if err != nil {
			s.cfg.Logger.Debug("idle progress: consumer info", "partition", p, "err", err)
			continue
		}
		if ci := cons.CachedInfo(); ci.NumPending != 0 || ci.NumAckPending != 0 {
			continue
		}
		pr, err := s.store.MarkClaimed(ctx, p, cand, s.bar.floorOf(p))
		if err != nil {
			err = s.fenced(p, err)
		}
		if errors.Is(err, ledger.ErrClaimsRegressed) {
			err = s.reclaim(ctx, p)
		}
		if errors.Is(err, ledger.ErrFenced) {
			fence(err)
			return
		}
		if err != nil {
			if ctx.Err() == nil && !connect.RedisFull(err) { // a full Redis: the daemon logs it once
				s.cfg.Logger.Warn("idle progress: mark claimed", "partition", p, "err", err)
			}
			continue
		}
		if pr != nil {
			s.bar.setFloor(p, cand)
			s.bar.observe(pr)
			s.bar.raise(p, cand)
		}
	}
}
