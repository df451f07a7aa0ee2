// Package validator is the validator service: RAW → VALID or REJECTED.
//
// Each owned partition has its own durable consumer and is processed in
// stream order, in batches, by the project's one consume loop
// (stream.Consume): validate every record, claim the valid ones' event ids
// (a conflicting duplicate is rejected), publish the batch's outputs and
// wait for JetStream to store them; only then does the loop ack the batch
// with one ack. A crash anywhere before the ack redelivers the batch, and
// every output carries a Nats-Msg-Id, so nothing is stored twice. VALID outputs
// go in ordered atomic batches (stream.GroupPublisher), so that each
// VALID partition holds its messages in RAW order even when a publish
// fails and is retried (a lost stream leader); REJECTED outputs go
// pipelined (stream.PublishAll).
package validator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

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
	Owned     []int
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
}

// Service is one validator instance. Run it once.
type Service struct {
	js    jetstream.JetStream
	store *ledger.Store
	cfg   Config
	m     *metrics
	// validate is cfg.Validator.Validate (replaced in tests).
	validate validateFunc
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
// failed message from being overtaken (stream.OrderedPublisher); one
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
			s.valid = stream.NewGroupPublisher(s.js)
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	return &Service{js: js, store: store, cfg: cfg, m: newMetrics(cfg.Registerer), validate: cfg.Validator.Validate,
		bar: newBarrier(cfg.Registerer)}
}

// Durable is the validator's consumer name for partition p.
func (s *Service) durable(p int) string {
	name := "validator"
	if s.cfg.Names.Generation != wire.DefaultGeneration {
		name += "-g" + s.cfg.Names.Generation
	}
	return wire.Durable(name, p)
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
	spec := stream.ConsumerSpec{
		Stream:  s.cfg.Names.Stream(wire.Raw),
		Durable: s.durable(p),
		Filter:  s.cfg.Names.Subject(wire.Raw, p),
		AckAll:  true,
	}
	defer s.trackIdle(ctx, p, spec)() // claim progress while idle (barrier.go)
	s.cfg.Logger.Info("validator partition started", "partition", p)
	opts := stream.BatchOptions{Max: s.cfg.Batch, Logger: s.cfg.Logger.With("partition", p)}
	return stream.Consume(ctx, s.js, spec, opts, func(ctx context.Context, batch []jetstream.Msg) (stream.Outcome, error) {
		return stream.Outcome{}, s.handle(ctx, p, batch)
	})
}

type pending struct {
	ev    contract.Event
	raw   []byte
	seq   uint64
	claim int
}

func (s *Service) handle(ctx context.Context, p int, batch []jetstream.Msg) error {
	s.m.batch.Observe(float64(len(batch)))
	out := make([]*nats.Msg, 0, len(batch))
	var valid []pending
	var claims []ledger.Claim
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("validator: metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if hb := m.Headers().Get(wire.HdrHeartbeat); hb != "" {
			if _, err := strconv.ParseInt(hb, 10, 64); err != nil {
				out = append(out, s.rejectMsg(seq, m.Data(), contract.Reject(contract.ReasonInvalidField, "", "heartbeat progress %q is not an integer", hb)))
				continue
			}
			msg := stream.NewMsg(s.cfg.Names.Subject(wire.Valid, p), heartbeatID(p, seq), nil)
			msg.Header.Set(wire.HdrHeartbeat, hb)
			msg.Header.Set(wire.HdrRawSeq, strconv.FormatUint(seq, 10))
			out = append(out, msg)
			s.m.in.WithLabelValues("heartbeat").Inc()
			continue
		}
		if rej := s.poison(meta, m.Data()); rej != nil {
			s.cfg.Logger.Warn("poison message routed to REJECTED", "partition", p, "raw_seq", seq, "deliveries", meta.NumDelivered)
			out = append(out, s.rejectMsg(seq, m.Data(), rej))
			continue
		}
		ev, rej := s.validateOne(m)
		if rej != nil {
			out = append(out, s.rejectMsg(seq, m.Data(), rej))
			continue
		}
		valid = append(valid, pending{ev: ev, raw: m.Data(), seq: seq, claim: len(claims)})
		// The claim day is the day RAW stored the record, not its
		// ingested_at: a producer may write ingested_at, and a forged one
		// would file the claim where the first version's claim is not
		// looked up, or advance the retirement past live claims.
		claims = append(claims, ledger.Claim{EventID: ev.EventID, Fingerprint: ev.Fingerprint, Seq: seq, Day: ingestDay(meta.Timestamp)})
		out = append(out, nil) // placeholder keeps stream order
	}
	// Claims, then the publication barrier: the lowest RAW sequence of an
	// id in any partition holds it (docs/spec.md §2, barrier.go).
	conflicts, err := s.claim(ctx, p, batch, claims)
	if err != nil {
		return err
	}
	if err := s.retireClaims(ctx, claims); err != nil {
		return err
	}
	vi := 0
	for i := range out {
		if out[i] != nil {
			continue
		}
		v := valid[vi]
		vi++
		if conflicts[v.claim] {
			out[i] = s.rejectMsg(v.seq, v.raw, contract.Reject(contract.ReasonConflictingDuplicate, v.ev.EventID,
				"event_id %q was first seen with other content", v.ev.EventID))
			continue
		}
		out[i] = s.validMsg(v)
	}
	// VALID must hold each partition's messages in RAW order (the
	// windower's watermark and lateness follow it), so it is written with
	// ordered atomic batches; REJECTED is not read in order and goes
	// pipelined, alongside.
	var validOut, rejected []*nats.Msg
	rejSubject := s.cfg.Names.Subject(wire.Rejected, 0)
	for _, m := range out {
		if m.Subject == rejSubject {
			rejected = append(rejected, m)
		} else {
			validOut = append(validOut, m)
		}
	}
	// REJECTED is published alongside VALID; a failure of one does not
	// stop the other (no shared context), and VALID's error comes first.
	var rej errgroup.Group
	rej.Go(func() error {
		_, err := stream.PublishAll(ctx, s.js, rejected)
		return err
	})
	err = s.publishValid(ctx, validOut)
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
	// The batch is handled; the consume loop acks it when this returns.
	return s.cfg.Failpoints.Hit(failpoint.ValidatorAfterPublish)
}

func (s *Service) validMsg(v pending) *nats.Msg {
	p := window.Route(v.ev.PartitionKey, v.ev.EventID, s.cfg.Partitions, s.cfg.HotKeys)
	body, _ := json.Marshal(&v.ev)
	msg := stream.NewMsg(s.cfg.Names.Subject(wire.Valid, p), v.ev.EventID, body)
	kind := wire.KindOther
	if v.ev.Counts() {
		kind = wire.KindSubmission
	}
	msg.Header.Set(wire.HdrKind, kind)
	msg.Header.Set(wire.HdrTime, strconv.FormatInt(v.ev.OccurredAt.UnixMilli(), 10))
	msg.Header.Set(wire.HdrEventID, v.ev.EventID)
	msg.Header.Set(wire.HdrRawSeq, strconv.FormatUint(v.seq, 10))
	s.m.out.WithLabelValues("valid").Inc()
	return msg
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
		return s.store.RetireClaims(ctx, newest)
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
