// Package validator is the validator service: RAW → VALID or REJECTED.
//
// Each owned partition has its own durable consumer and is processed in
// stream order, in batches, by the project's one consume loop
// (stream.Consume): validate every record, claim the valid ones' event ids
// (a conflicting duplicate is rejected), publish the batch's outputs and
// wait for JetStream to store them; only then does the loop ack the batch
// with one ack. A crash anywhere before the ack redelivers the batch, and
// every output carries a Nats-Msg-Id, so nothing is stored twice.
//
// A batch's valid records and heartbeats go to VALID as one frame
// (wire.Frame: per record what the windower needs, not the event body),
// whose message id names the partition and the RAW range; a redelivered
// batch cut at other bounds makes a frame with another id, whose records
// the windower recognises by their RAW sequence (ledger.Record.RawSeq).
// Frames go in order (stream.GroupPublisher's ordered atomic batches on a
// replicated VALID), so that each VALID partition holds its records in RAW
// order even when a publish fails and is retried (a lost stream leader);
// REJECTED outputs go pipelined (stream.PublishAll).
package validator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config configures a validator instance.
type Config struct {
	Names      wire.Names
	Partitions int
	// HotKeys spreads declared busy partition keys over several VALID
	// partitions (window.Route). Ingest must route RAW the same way, so
	// that each RAW partition feeds exactly its VALID partition.
	HotKeys window.HotKeys
	// Owned lists the partitions this instance processes (nil: all).
	Owned []int
	// Epochs holds the fencing token of each owned partition (service.Deps
	// .Epochs; nil or 0: not fenced). Each claim progress mark of RAW
	// partition p carries Epochs[p] (ledger.Store.Fence); a mark refused
	// because a later owner holds p stops the instance with an error
	// wrapping ledger.ErrFenced, before the batch is published or acked.
	Epochs    map[int]uint64
	Validator *contract.Validator
	Batch     int
	Logger    *slog.Logger
	// Registerer receives the metrics (nil: none).
	Registerer prometheus.Registerer
	Failpoints *failpoint.Set
	// Now gives the received time of a message whose JetStream metadata
	// cannot be read (default time.Now); every RAW message has it, so this
	// is a fallback. The received time is otherwise the RAW message's
	// JetStream timestamp.
	Now func() time.Time
	// MaxDeliveries bounds how often one RAW record is delivered before it
	// is given up as poison: a record delivered more often goes to REJECTED
	// (invalid_field, "poison message") without being validated again.
	// Zero means DefaultMaxDeliveries; negative turns the guard off.
	MaxDeliveries int
	// IdleEvery is how often an idle partition's claim progress is
	// advanced (default 50ms), BarrierPoll how often a partition waiting
	// at the publication barrier reads the progress other instances write
	// (default 20ms); see barrier.go and config.WaitsFor.
	IdleEvery, BarrierPoll time.Duration
	// Linger is how long a batch waits to fill after its first message
	// when no more are buffered (default 1ms; config.Waits.ConsumeLinger).
	Linger time.Duration
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.IdleEvery <= 0 {
		c.IdleEvery = defaultIdleEvery
	}
	if c.BarrierPoll <= 0 {
		c.BarrierPoll = defaultBarrierPoll
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	return c
}

// Service is one validator instance. Run it once.
type Service struct {
	js    jetstream.JetStream
	store *ledger.Store
	cfg   Config
	m     *metrics
	// validate is cfg.Validator.Check (replaced in tests).
	validate validateFunc
	// ahead holds the batches claimed ahead of handle (ahead.go).
	ahead aheadStore
	// rawSubjects maps RAW's partition subjects to their partitions.
	rawSubjects map[string]int
	// claimDay is the newest ingest day seen (claims retire behind it).
	claimDay atomic.Int64
	// valid writes VALID for every partition when VALID is replicated:
	// each partition's batches in order, the batches that meet in time in
	// one atomic commit. Nil on a single-replica VALID (see publishValid).
	valid     *stream.GroupPublisher
	validOnce sync.Once
	// bar is the publication barrier of cross-partition conflicts
	// (barrier.go).
	bar *barrier
}

// publishValid stores a partition's VALID outputs in order. A replicated
// VALID can change leader under a publish, and only atomic batches keep a
// failed message from being overtaken (stream.Committer); one
// server stores one connection's messages as they come, and an atomic
// batch there is staged in a synced store of its own, which costs tens of
// milliseconds a batch: PublishInOrder is enough. The replica count is
// read once; if it cannot be read, atomic batches are used (always safe).
func (s *Service) publishValid(ctx context.Context, msgs []*nats.Msg) error {
	s.validOnce.Do(func() {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		name := s.cfg.Names.Stream(wire.Valid)
		replicas := 0
		st, err := s.js.Stream(ictx, name)
		if err == nil {
			replicas = st.CachedInfo().Config.Replicas
		}
		if err != nil || replicas > 1 {
			s.valid = stream.NewGroupPublisher(s.js, stream.CommitterConfig{})
		}
		s.cfg.Logger.Info("VALID ordering", "stream", name, "replicas", replicas, "atomic_batches", s.valid != nil, "lookup_err", err)
	})
	var err error
	if s.valid != nil {
		_, err = s.valid.Publish(ctx, msgs)
	} else {
		_, err = stream.PublishInOrder(ctx, s.js, msgs)
	}
	return err
}

// New returns a validator using js for streams and store for claims.
func New(js jetstream.JetStream, store *ledger.Store, cfg Config) *Service {
	cfg = cfg.withDefaults()
	if len(cfg.Epochs) > 0 {
		store = store.Fence(cfg.Epochs)
	}
	raw := make(map[string]int, cfg.Partitions)
	for p := 0; p < cfg.Partitions; p++ {
		raw[cfg.Names.Subject(wire.Raw, p)] = p
	}
	return &Service{js: js, store: store, cfg: cfg, m: newMetrics(cfg.Registerer), validate: checkFunc(cfg.Validator),
		bar: newBarrier(cfg.Registerer), rawSubjects: raw}
}

// Durable is the validator's consumer name for partition p.
func (s *Service) durable(p int) string {
	return s.cfg.Names.ServiceDurable("validator", p)
}

// Run processes the owned partitions until ctx ends (nil) or one of them
// fails (its error; the others are stopped).
func (s *Service) Run(ctx context.Context) error {
	owned := s.cfg.Owned
	if owned == nil {
		for p := 0; p < s.cfg.Partitions; p++ {
			owned = append(owned, p)
		}
	}
	// The first partition to fail ends the others. The group's cause is
	// that failure, or ctx's own end if that came first: a stop, even if a
	// partition then failed on it.
	g, gctx := errgroup.WithContext(ctx)
	for _, p := range owned {
		g.Go(func() error { return s.runPartition(gctx, p) })
	}
	_ = g.Wait()
	if err := context.Cause(gctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// runPartition consumes RAW partition p. The loop acks a batch after
// handle returned nil for it (docs/spec.md §4); a gap in the deliveries
// resumes after the last batch handled, whose outputs are stored.
func (s *Service) runPartition(ctx context.Context, p int) error {
	// A mark refused for a later owner (ledger.ErrFenced) stops the
	// partition from the idle progress too: cancelled with that cause.
	ctx, fence := context.WithCancelCause(ctx)
	defer fence(nil)
	err := s.consumePartition(ctx, p, fence)
	if cause := context.Cause(ctx); errors.Is(cause, ledger.ErrFenced) {
		return cause
	}
	return err
}

// consumePartition is runPartition's consume loop; fence stops it.
func (s *Service) consumePartition(ctx context.Context, p int, fence context.CancelCauseFunc) error {
	spec := stream.ConsumerSpec{
		Stream:  s.cfg.Names.Stream(wire.Raw),
		Durable: s.durable(p),
		Filter:  s.cfg.Names.Subject(wire.Raw, p),
		AckAll:  true,
	}
	defer s.trackIdle(ctx, p, spec, fence)() // claim progress while idle (barrier.go)
	// What the consumer acknowledged was claimed: Redis holding less lost
	// it, and it is claimed again before the first batch (regress.go).
	if err := s.checkClaims(ctx, p, spec, true, 0); err != nil {
		return fmt.Errorf("validator: partition %d: claim progress check: %w", p, err)
	}
	s.cfg.Logger.Info("validator partition started", "partition", p)
	opts := stream.BatchConfig{Max: s.cfg.Batch, Linger: s.cfg.Linger, Logger: s.cfg.Logger.With("partition", p),
		Ahead: func(ctx context.Context, batch []jetstream.Msg) { s.claimAhead(ctx, p, batch) }}
	return stream.Consume(ctx, s.js, spec, opts, func(ctx context.Context, batch []jetstream.Msg) (stream.Outcome, error) {
		err := s.handle(ctx, p, batch)
		if connect.RedisFull(err) {
			// A full Redis refused a claim (docs/spec.md §4): the claims
			// are idempotent, so the batch waits and is handed again.
			return stream.Outcome{}, stream.Retry(err)
		}
		return stream.Outcome{}, err
	})
}

// pending is a valid record waiting for its claim: its frame record and
// VALID partition, its RAW bytes, and the index of its claim.
type pending struct {
	it    item
	raw   []byte
	claim int
}

// item is one output of a batch, in RAW order: a frame record for VALID
// partition vp, or (rec.Kind 0) a valid record waiting for its claim.
type item struct {
	vp  int
	rec wire.FrameRecord
	v   int // index in valid, for a record waiting for its claim
}

// maxFrameRecords bounds the records of one frame: with event ids of at
// most 128 bytes a frame stays far below JetStream's 1 MB payload limit.
const maxFrameRecords = 2000

// prepared is a batch read once: its frame items, the valid records
// waiting for their claims, their claims, the rejections, and how many of
// its messages were heartbeats.
type prepared struct {
	items      []item
	valid      []pending
	claims     []ledger.Claim
	rejected   []*nats.Msg
	heartbeats int
}

// prepare validates a batch of partition p.
func (s *Service) prepare(p int, batch []jetstream.Msg) (*prepared, error) {
	s.m.batch.Observe(float64(len(batch)))
	var rejected []*nats.Msg
	items := make([]item, 0, len(batch))
	valid := make([]pending, 0, len(batch))
	claims := make([]ledger.Claim, 0, len(batch))
	heartbeats := 0
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("validator: metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if hb := m.Headers().Get(wire.HdrHeartbeat); hb != "" {
			heartbeats++
			t, err := strconv.ParseInt(hb, 10, 64)
			if err != nil {
				rejected = append(rejected, s.rejectMsg(seq, m.Data(), contract.Reject(contract.ReasonInvalidField, "", "heartbeat progress %q is not an integer", hb)))
				continue
			}
			items = append(items, item{vp: p, rec: wire.FrameRecord{Kind: wire.FrameHeartbeat, RawSeq: seq, Time: t,
				SourceID: m.Headers().Get(wire.HdrSource), Received: meta.Timestamp.UnixMilli(), Leave: m.Headers().Get(wire.HdrLeave) == "1"}})
			continue
		}
		if rej := s.poison(meta, m.Data()); rej != nil {
			s.cfg.Logger.Warn("poison message routed to REJECTED", "partition", p, "raw_seq", seq, "deliveries", meta.NumDelivered)
			rejected = append(rejected, s.rejectMsg(seq, m.Data(), rej))
			continue
		}
		it, rej := s.validateOne(m.Data(), m.Headers(), meta.Timestamp)
		if rej != nil {
			rejected = append(rejected, s.rejectMsg(seq, m.Data(), rej))
			continue
		}
		it.rec.RawSeq = seq
		it.rec.SourceID, it.rec.Received = m.Headers().Get(wire.HdrSource), meta.Timestamp.UnixMilli()
		items = append(items, item{v: len(valid)})
		valid = append(valid, pending{it: it, raw: m.Data(), claim: len(claims)})
		// The claim day is the day RAW stored the record, not its
		// ingested_at: a producer may write ingested_at, and a forged one
		// would file the claim where the first version's claim is not
		// looked up, or advance the retirement past live claims.
		claims = append(claims, ledger.Claim{EventID: it.rec.EventID, Fingerprint: it.rec.Fingerprint, Seq: seq, Day: ingestDay(meta.Timestamp)})
	}
	return &prepared{items: items, valid: valid, claims: claims, rejected: rejected, heartbeats: heartbeats}, nil
}

func (s *Service) handle(ctx context.Context, p int, batch []jetstream.Msg) error {
	pre, first := s.takeAhead(p, batch)
	if pre == nil {
		var err error
		if pre, err = s.prepare(p, batch); err != nil {
			return err
		}
	}
	items, valid, claims, rejected := pre.items, pre.valid, pre.claims, pre.rejected
	// Claims, then the publication barrier: the lowest RAW sequence of an
	// id in any partition holds it (docs/spec.md §2, barrier.go).
	conflicts, err := s.claim(ctx, p, batch, claims, first)
	if err != nil {
		return err
	}
	if err := s.retireClaims(ctx, claims); err != nil {
		return err
	}
	// A conflicting copy's REJECTED row names the window of the copy that
	// holds the id, so that explain finds it as long as the window is kept.
	var conflicting []ledger.Claim
	var at []int // claim index of each conflicting claim
	for i, c := range claims {
		if conflicts[i] {
			conflicting, at = append(conflicting, c), append(at, i)
		}
	}
	holderWins, err := s.holderWindows(ctx, p, conflicting)
	if err != nil {
		return err
	}
	windows := make(map[int]string, len(at))
	for k, i := range at {
		windows[i] = holderWins[k]
	}
	kept := items[:0]
	nValid := 0
	for _, it := range items {
		if it.rec.Kind != 0 {
			kept = append(kept, it)
			continue
		}
		v := valid[it.v]
		if conflicts[v.claim] {
			id := v.it.rec.EventID
			msg := s.rejectMsg(v.it.rec.RawSeq, v.raw, contract.Reject(contract.ReasonConflictingDuplicate, id,
				"event_id %q was first seen with other content", id))
			if w := windows[v.claim]; w != "" {
				msg.Header.Set(wire.HdrWindow, w)
			}
			rejected = append(rejected, msg)
			continue
		}
		kept = append(kept, v.it)
		nValid++
	}
	s.m.out.WithLabelValues("valid").Add(float64(nValid))
	// VALID must hold each partition's records in RAW order (the
	// windower's watermark and lateness follow it): they go as frames,
	// written in order (publishValid). REJECTED is not read in order and
	// goes pipelined, alongside.
	validOut := s.frames(p, kept)
	// REJECTED is published alongside VALID; a failure of one does not
	// stop the other (no shared context), and VALID's error comes first.
	var rej errgroup.Group
	rej.Go(func() error {
		_, err := stream.PublishAll(ctx, s.js, rejected)
		return err
	})
	if len(validOut) > 0 {
		err = s.publishValid(ctx, validOut)
	}
	orderBroken := errors.Is(err, stream.ErrOrderBroken)
	if orderBroken {
		s.cfg.Logger.Error("VALID is out of RAW order: rebuild into a new generation (docs/recovery.md)", "partition", p, "err", err)
	}
	if rerr := rej.Wait(); err == nil {
		err = rerr
	}
	if err != nil {
		if orderBroken {
			return err
		}
		// A publish that failed (a server restarting, a leader lost) is
		// retried by the loop with the same batch: every output has its
		// Nats-Msg-Id, so what was stored is not stored twice.
		return stream.Retry(err)
	}
	// The batch is handled (counted once, however often it was tried);
	// the consume loop acks it when this returns.
	s.m.in.WithLabelValues(kindHeartbeat).Add(float64(pre.heartbeats))
	s.m.in.WithLabelValues(kindRecord).Add(float64(len(batch) - pre.heartbeats))
	return s.cfg.Failpoints.Hit(failpoint.ValidatorAfterPublish)
}

// frameItem is the frame record of the valid record c (all but RawSeq),
// for its VALID partition. Its event id and store share one copy of the
// record's bytes.
func (s *Service) frameItem(c *contract.Checked) item {
	var b strings.Builder
	b.Grow(len(c.EventID) + len(c.PartitionKey))
	b.Write(c.EventID)
	b.Write(c.PartitionKey)
	both := b.String()
	id, key := both[:len(c.EventID)], both[len(c.EventID):]
	rec := wire.FrameRecord{Kind: wire.FrameOther, Time: c.OccurredAt.UnixMilli(), EventID: id,
		Type: c.Type, Fingerprint: c.Fingerprint}
	if c.Counts() {
		// The window's breakdown: by store, with the amount the batch
		// pass reads the same way (docs/spec.md §5.1).
		rec.Kind = wire.FrameSubmission
		rec.Store = key
		rec.AmountCents, rec.Priced = c.AmountCents, c.Priced
	}
	return item{vp: window.Route(key, id, s.cfg.Partitions, s.cfg.HotKeys), rec: rec}
}

// frames groups the records of RAW partition p's batch into VALID frames:
// one per VALID partition (ingest routes like the validator, so normally
// one, p's own), in RAW order, at most maxFrameRecords each, in the order
// of their first record. Each frame's message id names p and its RAW range.
func (s *Service) frames(p int, items []item) []*nats.Msg {
	var order []int
	by := map[int][]wire.FrameRecord{}
	for _, it := range items {
		if _, ok := by[it.vp]; !ok {
			order = append(order, it.vp)
		}
		by[it.vp] = append(by[it.vp], it.rec)
	}
	var out []*nats.Msg
	for _, vp := range order {
		recs := by[vp]
		for len(recs) > 0 {
			n := min(len(recs), maxFrameRecords)
			f := wire.Frame{Partition: p, Records: recs[:n]}
			recs = recs[n:]
			first, last := f.Records[0].RawSeq, f.Records[n-1].RawSeq
			msg := stream.NewMsg(s.cfg.Names.Subject(wire.Valid, vp), wire.FrameMsgID(p, first, last), wire.AppendFrame(nil, &f))
			msg.Header.Set(wire.HdrFrame, strconv.Itoa(wire.FrameVersion))
			msg.Header.Set(wire.HdrRawSeq, strconv.FormatUint(last, 10))
			out = append(out, msg)
		}
	}
	return out
}

// fenced counts and logs err when it says a later owner holds partition
// p (ledger.ErrFenced), and returns it.
func (s *Service) fenced(p int, err error) error {
	if errors.Is(err, ledger.ErrFenced) {
		s.m.fenced.Inc()
		s.cfg.Logger.Warn("a later owner holds the partition: this instance stops processing it, nothing more published or acknowledged",
			"partition", p, "epoch", s.cfg.Epochs[p], "err", err)
	}
	return err
}

// rejectMsg is the REJECTED message of the RAW record at seq. It carries
// the event id only when the rejection names one: the contract leaves it
// empty on purpose when the record's id is ambiguous (a repeated or
// case-variant event_id key). A record longer than keepBytes is cut there,
// its full size in wire.HdrOrigSize, so the message always fits.
func (s *Service) rejectMsg(seq uint64, raw []byte, rej *contract.RejectError) *nats.Msg {
	body, orig := raw, ""
	if keep := s.keepBytes(); len(raw) > keep {
		body, orig = raw[:keep], strconv.Itoa(len(raw))
	}
	msg := stream.NewMsg(s.cfg.Names.Subject(wire.Rejected, 0), "rej-"+strconv.FormatUint(seq, 10), body)
	msg.Header.Set(wire.HdrReason, string(rej.Reason))
	msg.Header.Set(wire.HdrDetail, rej.Detail)
	msg.Header.Set(wire.HdrRawSeq, strconv.FormatUint(seq, 10))
	if orig != "" {
		msg.Header.Set(wire.HdrOrigSize, orig)
	}
	if rej.EventID != "" {
		msg.Header.Set(wire.HdrEventID, rej.EventID)
	}
	s.m.out.WithLabelValues("rejected_" + string(rej.Reason)).Inc()
	return msg
}

func ingestDay(t time.Time) int64 { return t.Unix() / 86400 }

// retireClaims retires claims older than the claim horizon once the newest
// ingest day seen by this instance advances.
func (s *Service) retireClaims(ctx context.Context, claims []ledger.Claim) error {
	newest := s.claimDay.Load()
	for _, c := range claims {
		newest = max(newest, c.Day)
	}
	if old := s.claimDay.Load(); newest > old && s.claimDay.CompareAndSwap(old, newest) {
		if err := s.store.RetireClaims(ctx, newest); err != nil {
			s.claimDay.CompareAndSwap(newest, old) // the retried batch retires again
			return err
		}
	}
	return nil
}

// Process validates one batch of RAW messages of partition p and publishes
// the outputs, exactly as the live loop's handler does; it does not ack
// (receiptctl replay uses it with an ordered consumer). An error wrapping
// stream.ErrRetry is transient: the same batch may be processed again.
func (s *Service) Process(ctx context.Context, p int, batch []jetstream.Msg) error {
	return s.handle(ctx, p, batch)
}
