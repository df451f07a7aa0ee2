// Package windower is the windower service: VALID → Redis (window partials,
// ledger, checkpoint) → LATE and CHANGES.
//
// Each owned partition is processed in VALID order, in batches: one Lua
// script call applies the whole batch atomically (ledger check, counts,
// versions, corrections, checkpoint), then the batch's too-late events go to
// LATE and one change notice to CHANGES, and only then does the project's
// one consume loop (stream.Consume) ack the batch.
// A crash before the ack redelivers the batch; the script recognises it by
// the checkpoint and changes nothing, and the outputs are published again
// under the same Nats-Msg-Id.
package windower

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/failpoint"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config configures a windower instance.
type Config struct {
	Names      wire.Names
	Partitions int
	// Owned lists the partitions this instance processes (nil: all).
	Owned []int
	// Epochs holds the fencing token of each owned partition (service.Deps
	// .Epochs; nil or 0: not fenced). Every Redis step of partition p
	// carries Epochs[p] (ledger.Store.Fence); a step refused because a
	// later owner holds p stops the instance with an error wrapping
	// ledger.ErrFenced, nothing more acknowledged.
	Epochs     map[int]uint64
	Batch      int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Failpoints *failpoint.Set
	// Trace, when set, is called with every batch's decisions right after
	// the script (before any failpoint after the write), in order.
	Trace func(p int, recs []Trace)
	// RetireEvery throttles retirement checks per partition (default 1s).
	RetireEvery time.Duration
	// Linger is how long a batch waits to fill after its first message
	// (stream.BatchConfig; default 1ms).
	Linger time.Duration
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.RetireEvery <= 0 {
		c.RetireEvery = time.Second
	}
	return c
}

// Trace is the decision for one VALID message.
type Trace struct {
	Partition int
	ValidSeq  uint64
	RawSeq    uint64
	EventID   string
	Decision  ledger.Decision
}

// retireEventStep is the partition watermark progress (ms of event time)
// after which a retirement pass runs even within RetireEvery.
const retireEventStep = 10 * 60 * 1000

// Service is one windower instance. Its store's replay horizon
// (ledger.Config.Horizon) decides retirement: a window's state (ledger,
// partial) is deleted once the global watermark has passed its end + grace
// + horizon and its final snapshot is in the KV bucket.
type Service struct {
	js    jetstream.JetStream
	store *ledger.Store
	cfg   Config
	m     *metrics
	// retiring serializes retirement passes per partition.
	retiring sync.Map // partition -> *sync.Mutex
	// nonce tells this instance's notices after a Redis loss apart from
	// every earlier one (partState.noticeID).
	nonce string
	// confirmEvery spaces the answers that confirm a stream behind the
	// checkpoint (confirmEvery; tests shorten it).
	confirmEvery time.Duration
}

// New returns a windower that applies to store and reads/writes js.
func New(js jetstream.JetStream, store *ledger.Store, cfg Config) *Service {
	cfg = cfg.withDefaults()
	if len(cfg.Epochs) > 0 {
		store = store.Fence(cfg.Epochs)
	}
	return &Service{js: js, store: store, cfg: cfg, m: newMetrics(cfg.Registerer), confirmEvery: confirmEvery,
		nonce: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

func (s *Service) durable(p int) string {
	return s.cfg.Names.ServiceDurable("windower", p)
}

// Run processes the owned partitions until ctx ends (nil) or one fails.
func (s *Service) Run(ctx context.Context) error {
	owned := s.cfg.Owned
	if owned == nil {
		for p := 0; p < s.cfg.Partitions; p++ {
			owned = append(owned, p)
		}
	}
	// The first goroutine to fail ends the others.
	g, ctx := errgroup.WithContext(ctx)
	parts := map[int]*partState{}
	for _, p := range owned {
		parts[p] = &partState{}
	}
	for _, p := range owned {
		g.Go(func() error { return s.runPartition(ctx, p, parts[p]) })
	}
	g.Go(func() error { s.watchCheckpoints(ctx, owned, parts); return nil })
	// The stream must never be behind the checkpoint: checked at start by
	// each partition, and here every few seconds, which covers a nats-server
	// that came back (reconnect) without its tail.
	g.Go(func() error {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if err := s.checkStream(ctx, owned); err != nil && ctx.Err() == nil {
				if errors.Is(err, errStreamBehind) {
					return err
				}
				s.cfg.Logger.Warn("stream check failed", "err", err)
			}
		}
	})
	if s.store.Horizon() > 0 {
		// Retire on wall-clock time too, so an idle partition (or the end
		// of a bounded stream) still gets its final windows retired.
		g.Go(func() error {
			t := time.NewTicker(s.cfg.RetireEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				err := s.retirePass(ctx, owned)
				if errors.Is(err, ledger.ErrFenced) {
					return err
				}
				if err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("retirement pass failed", "err", err)
				}
			}
		})
	}
	// The group's cause is the first failure, or ctx's own end if that
	// came first: a stop, even if a goroutine then failed on it.
	_ = g.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// runPartitionFrom runs partition p once from the checkpoint Redis holds;
// cancel (with ledger.ErrRegressed) stops it when that checkpoint is lost.
func (s *Service) runPartitionFrom(ctx context.Context, p int, ps *partState, cancel context.CancelCauseFunc) error {
	ck, err := s.store.Checkpoint(ctx, p)
	if err != nil {
		return err
	}
	ps.start(ck.Seq, cancel)
	streamName := s.cfg.Names.Stream(wire.Valid)
	if err := s.verifyAtStart(ctx, p, ck.Seq); err != nil {
		if errors.Is(err, errStreamBehind) {
			return err
		}
		return fmt.Errorf("windower: stream %s: %w", streamName, err)
	}
	// Resume after the last batch whose outputs were published: a batch
	// applied but not published (a crash between the script and the
	// publish) is redelivered, the script changes nothing the second time,
	// and its LATE and CHANGES messages are published again. (The
	// consumer's ack floor is not used: a crash between deleting and
	// re-creating the consumer loses it.)
	//
	// The loop acks a batch only after handle returned (docs/spec.md §4);
	// after a gap in the deliveries it opens the consumer again after the
	// last batch handled, which is this same published mark.
	start := min(ck.Published, ck.Seq) + 1
	spec := stream.ConsumerSpec{
		Stream:   streamName,
		Durable:  s.durable(p),
		Filter:   s.cfg.Names.Subject(wire.Valid, p),
		StartSeq: start,
		AckAll:   true,
	}
	s.cfg.Logger.Info("windower partition started", "partition", p, "checkpoint", ck.Seq, "watermark", ck.Watermark, "start", start)
	lastWM, lastSeq, published := ck.Watermark, ck.Seq, min(ck.Published, ck.Seq)
	lastRetireWM := ck.Watermark
	opts := stream.BatchConfig{Max: s.cfg.Batch, Linger: s.cfg.Linger, Logger: s.cfg.Logger.With("partition", p)}
	mark := s.newIdleMark(ctx, p, published)
	defer mark.stop()
	return stream.Consume(ctx, s.js, spec, opts, func(ctx context.Context, batch []jetstream.Msg) (stream.Outcome, error) {
		res, done, err := s.handle(ctx, p, ps, batch, lastWM, lastSeq, published)
		if connect.RedisFull(err) {
			// A full Redis refused the script or the published mark
			// (docs/spec.md §4): both are idempotent, so the batch waits
			// and is handed again.
			return stream.Outcome{}, stream.Retry(err)
		}
		if err != nil {
			return stream.Outcome{}, err
		}
		mark.handled(done, published) // the apply carried the mark before this batch's
		lastWM, lastSeq, published = res.Watermark, res.Seq, max(published, done)
		ps.advance(res.Seq)
		wm := res.Watermark
		// Retire also on event time, for fast replays, where hours of event
		// time pass between two ticks of the retirement timer.
		if s.store.Horizon() > 0 && wm-lastRetireWM >= retireEventStep {
			lastRetireWM = wm
			if err := s.retire(ctx, p); err != nil {
				if connect.RedisFull(err) {
					return stream.Outcome{}, stream.Retry(err) // the batch replays as a no-op
				}
				return stream.Outcome{}, err
			}
		}
		return stream.Outcome{}, nil
	})
}

// handle applies one batch and publishes its outputs; it does not ack (the
// consume loop does, once it returned). It returns the script's result and
// the last VALID sequence of the batch, whose outputs (and those of every
// record before it) are now published. A failed publish is transient
// (stream.Retry): the loop hands the same batch again, the script replays
// it without change and the outputs go again under their Nats-Msg-Ids.
func (s *Service) handle(ctx context.Context, p int, ps *partState, batch []jetstream.Msg, lastWM int64, lastSeq, published uint64) (*ledger.Result, uint64, error) {
	s.m.batch.Observe(float64(len(batch)))
	if md, err := batch[0].Metadata(); err == nil && !md.Timestamp.IsZero() {
		s.m.step.Since(stepWait, md.Timestamp)
	}
	recs := make([]ledger.Record, 0, len(batch))
	// Per record: its RAW sequence, and the event body a VALID message of
	// the releases before frames carried (nil for a frame's records).
	rawSeqs := make([]uint64, 0, len(batch))
	var bodies [][]byte
	for _, m := range batch {
		vrs, err := stream.ValidRecords(m)
		if err == nil && len(vrs) == 0 {
			err = errors.New("an empty frame")
		}
		if err != nil {
			// VALID is written only by the validator; a message it could
			// not have written is a bug or tampering, never skipped quietly.
			return nil, 0, fmt.Errorf("windower: %w", err)
		}
		legacy := vrs[0].Source < 0
		if legacy && bodies == nil {
			bodies = make([][]byte, len(recs), len(batch))
		}
		for _, vr := range vrs {
			r := ledger.Record{Seq: vr.Seq, Kind: ledger.Kind(vr.Kind), EventID: vr.EventID, Time: vr.Time,
				Store: vr.Store, AmountCents: vr.AmountCents, Priced: vr.Priced,
				Source: vr.SourceID, Received: vr.Received, Leave: vr.Leave}
			if vr.Source == p {
				r.RawSeq = vr.RawSeq // in RAW order: see ledger.Record
			}
			recs = append(recs, r)
			rawSeqs = append(rawSeqs, vr.RawSeq)
			switch {
			case legacy:
				bodies = append(bodies, m.Data())
			case bodies != nil:
				bodies = append(bodies, nil)
			}
		}
	}
	if err := s.cfg.Failpoints.Hit(failpoint.WindowerBeforeWrite); err != nil {
		return nil, 0, err
	}
	applying := time.Now()
	res, err := s.apply(ctx, p, recs, lastSeq, published)
	if err != nil {
		return nil, 0, err
	}
	publishing := s.m.step.Since(stepApply, applying)
	if s.cfg.Trace != nil {
		tr := make([]Trace, len(recs))
		for i, r := range recs {
			tr[i] = Trace{Partition: p, ValidSeq: r.Seq, RawSeq: rawSeqs[i], EventID: r.EventID, Decision: res.Decisions[i]}
		}
		s.cfg.Trace(p, tr)
	}
	if err := s.cfg.Failpoints.Hit(failpoint.WindowerAfterWrite); err != nil {
		return nil, 0, err
	}
	var out []*nats.Msg
	for i, d := range res.Decisions {
		s.m.decisions.WithLabelValues(string(d.Code)).Inc()
		reason := wire.ReasonAfterGrace
		switch d.Code {
		case ledger.Late, ledger.LateAgain:
		case ledger.Retired:
			reason = wire.ReasonRetired
		default:
			continue
		}
		body, _ := json.Marshal(&wire.LateEvent{
			EventID: recs[i].EventID, WindowID: d.WindowID, Reason: reason,
			Watermark: window.Time(d.Watermark), Partition: p, Seq: rawSeqs[i], Source: recs[i].Source, Event: bodyOf(bodies, i),
		})
		out = append(out, stream.NewMsg(s.cfg.Names.Subject(wire.Late, p), "late-"+recs[i].EventID, body))
	}
	if len(res.Changed) > 0 || res.Watermark != lastWM || anyReplayed(res) {
		body, _ := json.Marshal(&wire.Change{Partition: p, Seq: res.Seq, Watermark: res.Watermark, Windows: res.Changed})
		out = append(out, stream.NewMsg(s.cfg.Names.Subject(wire.Changes, p), ps.noticeID(p, recs[len(recs)-1].Seq), body))
	}
	if _, err := stream.PublishAll(ctx, s.js, out); err != nil {
		return nil, 0, stream.Retry(err)
	}
	s.m.step.Since(stepPublish, publishing)
	// The mark covers this batch's records only. A redelivered batch can be
	// shorter than the one first applied (the checkpoint, res.Seq, is then
	// ahead of it): marking up to the checkpoint would skip the outputs of
	// the applied records not redelivered yet if the instance died next.
	// The next batch's apply writes it, or the idle mark (mark.go).
	done := recs[len(recs)-1].Seq
	s.m.watermark.WithLabelValues(strconv.Itoa(p)).Set(float64(res.Watermark) / 1000)
	s.m.entries.Add(float64(res.Added))
	return res, done, nil
}

// fenced counts and logs err when it says a later owner holds partition
// p (ledger.ErrFenced), and returns it.
func (s *Service) fenced(p int, err error) error {
	if errors.Is(err, ledger.ErrFenced) {
		s.m.fenced.Inc()
		s.cfg.Logger.Warn("a later owner holds the partition: this instance stops processing it, nothing more acknowledged",
			"partition", p, "epoch", s.cfg.Epochs[p], "err", err)
	}
	return err
}

// maxApplyRecords bounds the records of one script call: a batch of many
// frames (a windower catching up) is applied in several calls, each of
// whole frames, so that no call holds Redis for long.
const maxApplyRecords = 4000

// apply applies recs in script calls of whole VALID messages, at most
// maxApplyRecords records each unless one message holds more, and returns
// their results as one. A crash between two calls is a crash inside a
// batch: the redelivery finds the first calls' records applied.
func (s *Service) apply(ctx context.Context, p int, recs []ledger.Record, lastSeq, published uint64) (*ledger.Result, error) {
	var res *ledger.Result
	changed := map[string]bool{}
	for len(recs) > 0 {
		n := applyLen(recs, maxApplyRecords)
		began := time.Now()
		r, err := s.store.Apply(ctx, p, recs[:n], lastSeq, published)
		if err != nil {
			return nil, s.fenced(p, err)
		}
		s.m.script.Observe(time.Since(began).Seconds())
		recs, lastSeq = recs[n:], r.Seq
		if res == nil {
			res = r
		} else {
			res.Decisions = append(res.Decisions, r.Decisions...)
			res.Seq, res.Watermark, res.Added = r.Seq, r.Watermark, res.Added+r.Added
		}
		for _, w := range r.Changed {
			if !changed[w] {
				if res != r {
					res.Changed = append(res.Changed, w)
				}
				changed[w] = true
			}
		}
	}
	return res, nil
}

// applyLen is how many of recs the next script call takes: at most limit,
// never part of a message (the records of one message share its Seq),
// and a whole message longer than limit on its own.
func applyLen(recs []ledger.Record, limit int) int {
	n := len(recs)
	if n <= limit {
		return n
	}
	n = limit
	for n > 0 && recs[n].Seq == recs[n-1].Seq {
		n--
	}
	if n == 0 {
		for n = 1; n < len(recs) && recs[n].Seq == recs[0].Seq; n++ {
		}
	}
	return n
}

// bodyOf is record i's event body, if its VALID message carried one.
func bodyOf(bodies [][]byte, i int) []byte {
	if i < len(bodies) {
		return bodies[i]
	}
	return nil
}

func anyReplayed(res *ledger.Result) bool {
	for _, d := range res.Decisions {
		if d.Code == ledger.Replayed || d.Code == ledger.LateAgain {
			return true
		}
	}
	return false
}

// checkStream compares the owned partitions' checkpoints with VALID's last
// sequence (checkpoints first: the stream only grows while it is healthy).
func (s *Service) checkStream(ctx context.Context, owned []int) error {
	all, err := s.store.Checkpoints(ctx, owned)
	if err != nil {
		return err
	}
	cks := make([]uint64, len(owned))
	for i, ck := range all {
		cks[i] = ck.Seq
	}
	return s.verify(ctx, owned, cks)
}
