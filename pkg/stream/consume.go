package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler processes one batch of messages in delivery order and stores its
// outputs (publishes them and waits for JetStream to confirm, or writes them
// durably) before it returns. It never acknowledges: Consume does, after it
// returns. It must be idempotent per batch: a batch may be handed to it
// again (after a transient failure, a restart, a gap).
//
// It returns nil when the batch is processed; an error wrapped with Retry
// when the failure is transient (the same messages come back, see Consume);
// any other error stops Consume, which returns it with nothing of the batch
// acknowledged.
type Handler func(ctx context.Context, batch []jetstream.Msg) (Outcome, error)

// Outcome is a handler's verdict on a batch it processed.
type Outcome struct {
	// Term holds the indexes (into the batch) of messages that must never
	// be delivered again (a notice that cannot be read, say): Consume
	// terminates them with TermReason instead of acknowledging them.
	Term []int
	// TermReason goes with every Term (it shows in the server's advisory).
	TermReason string
}

// ErrRetry marks a transient handler failure (a publish that timed out
// while a server restarted, say); match it with errors.Is.
var ErrRetry = errors.New("stream: transient failure")

// Retry marks err as transient (nil stays nil).
func Retry(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrRetry, err)
}

// BatchConfig tune Consume.
type BatchConfig struct {
	// Max is the largest batch (default 500).
	Max int
	// Linger is the longest a batch waits for more messages after its
	// first one arrived, when no more are buffered (default 1ms). It bounds
	// the latency batching adds; with a backlog, batches fill without
	// waiting.
	Linger time.Duration
	// Logger receives gaps, resets and retries (nil: none).
	Logger *slog.Logger
	// Ahead, if set (AckAll consumers only), is called with each batch as
	// soon as it is formed, in order, while the handler still works on
	// the batch before it: work that may run ahead of the handler (the
	// validator claims its event ids there). It must not acknowledge
	// anything; the handler still gets every batch, in order, and the
	// batch is acknowledged only when the handler returned nil. A batch
	// handed to Ahead may never reach the handler (a gap or a failure
	// ends the session first); it is delivered again, and handed to Ahead
	// again, later.
	Ahead func(ctx context.Context, batch []jetstream.Msg)
	// RetryInitial and RetryMax bound the exponential backoff between
	// retries of a transient handler failure and of re-opening the
	// consumer (defaults 100ms and 5s).
	RetryInitial, RetryMax time.Duration
}

func (o BatchConfig) withDefaults() BatchConfig {
	if o.Max <= 0 {
		o.Max = 500
	}
	if o.Linger <= 0 {
		o.Linger = time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Second
	}
	return o
}

func (o BatchConfig) backoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = o.RetryInitial
	b.MaxInterval = o.RetryMax
	b.Reset()
	return b
}

// ErrConsumeStopped is returned (wrapped with the cause) when the consumer
// cannot be opened again because the connection is closed for good.
var ErrConsumeStopped = errors.New("stream: consume stopped")

// errReset ends a delivery session: the loop re-opens the consumer at its
// checkpoint.
type errReset struct{ why string }

func (e *errReset) Error() string { return "stream: reset: " + e.why }

// Consume runs the consume loop (doc.go) on spec's durable consumer: it
// hands batches to h in order and acknowledges each once h returned nil. It
// returns nil when ctx ends, h's lasting error, or one wrapping ErrConsumeStopped.
func Consume(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, o BatchConfig, h Handler) error {
	o = o.withDefaults()
	if o.Ahead != nil && !spec.AckAll {
		return errors.New("stream: BatchConfig.Ahead needs an AckAll consumer")
	}
	l := &loop{js: js, spec: spec, o: o, h: h, retry: o.backoff(), watch: storeWatchOf(ctx)}
	defer func() {
		if l.full && l.watch != nil {
			l.watch.resumed()
		}
	}()
	for {
		c, err := l.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = l.session(ctx, c)
		var reset *errReset
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &reset):
			l.resets++
			o.Logger.Warn("consumer reset", "stream", spec.Stream, "durable", spec.Durable,
				"reason", reset.why, "resume_at", l.resumeAt())
		default:
			return err
		}
	}
}

// loop is the state of one Consume call across delivery sessions.
type loop struct {
	js    jetstream.JetStream
	spec  ConsumerSpec
	o     BatchConfig
	h     Handler
	retry *backoff.ExponentialBackOff
	// processed is the stream sequence of the last message h processed
	// (its batch returned nil); zero before the first.
	processed uint64
	resets    int
	// watch learns while the loop waits for the broker's store (full).
	watch *StoreWatch
	full  bool
}

// resumeAt is the checkpoint: the first stream sequence not processed, or
// zero (the ack floor) for an explicit-ack consumer or before anything was
// processed without a StartSeq.
func (l *loop) resumeAt() uint64 {
	if l.spec.AckAll && l.processed > 0 {
		return l.processed + 1
	}
	return l.spec.StartSeq
}

// open opens the consumer at the checkpoint, retrying with backoff.
func (l *loop) open(ctx context.Context) (jetstream.Consumer, error) {
	spec := l.spec
	spec.StartSeq = l.resumeAt()
	l.retry.Reset()
	c, err := backoff.Retry(ctx, func() (jetstream.Consumer, error) {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := Open(octx, l.js, spec)
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, backoff.Permanent(err)
		}
		return c, err
	}, backoff.WithBackOff(l.retry), backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, d time.Duration) {
			l.o.Logger.Warn("consumer open failed; retrying", "durable", spec.Durable, "err", err, "in", d)
		}))
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrConsumeStopped, spec.Durable, err)
	}
	return c, nil
}

// session consumes c until ctx ends (nil), a gap (*errReset) or a handler
// failure (its error).
func (l *loop) session(ctx context.Context, c jetstream.Consumer) error {
	if err := l.positioned(ctx, c.CachedInfo()); err != nil {
		return err
	}
	// The consumer sequence of the next delivery: Open just read the
	// consumer's info, and nothing else reads from it.
	cur := &cursor{next: c.CachedInfo().Delivered.Consumer + 1, seen: l.processed, ackAll: l.spec.AckAll}
	d, err := l.pull(c)
	if err != nil {
		return err
	}
	defer d.stop()
	// With Ahead, the handler runs in a goroutine of its own behind a
	// queue of one batch; every return below goes through q.finish, which
	// waits for it, so l is only used by one goroutine at a time.
	q := l.startAhead(ctx)
	var hfailed <-chan struct{}
	if q != nil {
		hfailed = q.failed
	}
	cc2 := d.cc.Closed()
	linger := time.NewTimer(l.o.Linger)
	linger.Stop()
	defer linger.Stop()
	batch := make([]jetstream.Msg, 0, l.o.Max)
	for {
		select {
		case <-ctx.Done():
			return q.finish(nil)
		case <-cc2:
			return q.finish(d.closed())
		case <-hfailed:
			return q.finish(nil)
		case <-d.probe:
			if gone := l.gone(ctx, c); gone != nil {
				return q.finish(gone)
			}
			continue
		case m := <-d.msgs:
			if gap := cur.accept(m); gap != nil {
				return q.finish(gap)
			}
			if q != nil {
				batch = make([]jetstream.Msg, 0, l.o.Max) // the handler may still hold the last one
			}
			batch = append(batch[:0], m)
		}
		var gap error
		var ended bool
		batch, gap, ended = l.fill(ctx, d, cur, batch, linger, cc2)
		if ended {
			return q.finish(nil)
		}
		if q != nil {
			l.o.Ahead(ctx, batch)
			select {
			case q.queue <- batch:
			case <-q.failed:
				return q.finish(nil)
			}
		} else if err := l.handle(ctx, batch); err != nil {
			return err
		}
		if gap != nil {
			return q.finish(gap)
		}
	}
}

// positioned checks, before a session pulls, that the consumer delivers
// next the first message after the checkpoint (the loop's, or before the
// loop processed anything, the consumer's ack floor): one that has
// delivered past it would have the loop's first ack acknowledge the
// messages in between, which nothing processed. Open positions the
// consumer it returns, but the broker may answer with another: a
// SIGKILL that cuts a consumer's delete short can leave its state file
// behind, and the create that follows takes it up (a fault test lost a
// partition's 680 events: the new consumer had delivered through 10453
// with its ack floor at 2877); a create is also answered with the durable
// already there when its configuration is the same. The only
// consumer allowed past the checkpoint is one whose stream no longer has
// the messages in between (retention moved the stream's first sequence
// past it). The gap returned (*errReset) re-opens the consumer, and Open
// recreates it where it must start.
func (l *loop) positioned(ctx context.Context, info *jetstream.ConsumerInfo) error {
	if !l.spec.AckAll {
		return nil
	}
	from := l.resumeAt()
	if from == 0 {
		from = info.AckFloor.Stream + 1 // the consumer's own checkpoint
	}
	if info.Delivered.Stream < from {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := l.js.Stream(ictx, l.spec.Stream)
	if err == nil && info.Delivered.Stream < st.CachedInfo().State.FirstSeq {
		return nil // the messages in between are gone from the stream
	}
	why := fmt.Sprintf("the consumer has delivered up to stream sequence %d, past the checkpoint %d (the first not processed)", info.Delivered.Stream, from)
	if err != nil {
		why += fmt.Sprintf(" (stream %s unread: %v)", l.spec.Stream, err)
	}
	return &errReset{why: why}
}

// fill adds to batch what d delivers, up to Max, until none arrives within
// the linger. gap is the delivery that broke the invariant (not added), if
// any; ended tells that ctx ended.
func (l *loop) fill(ctx context.Context, d *delivery, cur *cursor, batch []jetstream.Msg, linger *time.Timer, closed <-chan struct{}) (_ []jetstream.Msg, gap error, ended bool) {
	linger.Reset(l.o.Linger)
	defer linger.Stop()
	for len(batch) < l.o.Max {
		var m jetstream.Msg
		select {
		case m = <-d.msgs:
		default:
			select {
			case m = <-d.msgs:
			case <-linger.C:
				return batch, nil, false
			case <-ctx.Done():
				return batch, nil, true
			case <-closed:
				return batch, nil, false
			}
		}
		if gap = cur.accept(m); gap != nil {
			return batch, gap, false
		}
		batch = append(batch, m)
	}
	return batch, nil, false
}

// cursor is what a session checks each delivery against (doc.go): the
// consumer sequence of the next delivery, and the highest stream sequence
// handed to the handler (AckAll consumers only).
type cursor struct {
	next, seen uint64
	ackAll     bool
}

// accept checks m against the invariant and moves on; an error is the gap.
func (cur *cursor) accept(m jetstream.Msg) error {
	meta, err := m.Metadata()
	if err != nil {
		return &errReset{why: "no metadata: " + err.Error()}
	}
	if meta.Sequence.Consumer != cur.next {
		return &errReset{why: fmt.Sprintf("consumer sequence %d, want %d (stream sequence %d)",
			meta.Sequence.Consumer, cur.next, meta.Sequence.Stream)}
	}
	cur.next++
	if cur.ackAll {
		if meta.Sequence.Stream <= cur.seen {
			return &errReset{why: fmt.Sprintf("stream sequence %d redelivered (delivery %d) after %d",
				meta.Sequence.Stream, meta.NumDelivered, cur.seen)}
		}
		cur.seen = meta.Sequence.Stream
	}
	return nil
}

// delivery is one session's pull from the consumer.
type delivery struct {
	cc      jetstream.ConsumeContext
	msgs    chan jetstream.Msg
	stopped chan struct{}
	// probe is signalled when the pulls suggest the consumer is gone: a
	// broker that came back without it (a crash lost its directory) never
	// says "consumer deleted"; its pulls find no responder and heartbeats
	// stop, and nats.go pulls again for ever.
	probe   chan struct{}
	mu      sync.Mutex
	lastErr error
}

// pull starts pulling from c; a failure to start is a gap (*errReset).
func (l *loop) pull(c jetstream.Consumer) (*delivery, error) {
	d := &delivery{msgs: make(chan jetstream.Msg, 2*l.o.Max), stopped: make(chan struct{}), probe: make(chan struct{}, 1)}
	cc, err := c.Consume(func(m jetstream.Msg) {
		select {
		case d.msgs <- m:
		case <-d.stopped: // this session is over; the message is not acked
		}
	},
		jetstream.PullMaxMessages(2*l.o.Max),
		jetstream.PullHeartbeat(2*time.Second),
		jetstream.PullExpiry(5*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.mu.Lock()
			d.lastErr = err
			d.mu.Unlock()
			if absent(err) {
				select {
				case d.probe <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		return nil, &errReset{why: "pull: " + err.Error()}
	}
	d.cc = cc
	return d, nil
}

// stop ends the pull; messages still on their way are left unacknowledged.
func (d *delivery) stop() {
	d.cc.Stop()
	close(d.stopped)
}

// closed is the gap of a pull the client ended, with its last error.
func (d *delivery) closed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &errReset{why: fmt.Sprintf("delivery stopped (%v)", d.lastErr)}
}

// aheadQueue runs the handler in a goroutine of its own behind a queue of
// one batch, while Ahead sees the next batch (BatchConfig.Ahead).
type aheadQueue struct {
	queue  chan []jetstream.Msg
	failed chan struct{} // closed when the handler failed
	done   chan error
}

// startAhead starts the handler's goroutine; nil without Ahead.
func (l *loop) startAhead(ctx context.Context) *aheadQueue {
	if l.o.Ahead == nil {
		return nil
	}
	q := &aheadQueue{queue: make(chan []jetstream.Msg, 1), failed: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		var err error
		for b := range q.queue {
			if err != nil {
				continue // a batch after a failure: delivered again later
			}
			if err = l.handle(ctx, b); err != nil {
				close(q.failed)
			}
		}
		q.done <- err
	}()
	return q
}

// finish ends q's goroutine and returns its handler's failure, else err.
// A nil q returns err.
func (q *aheadQueue) finish(err error) error {
	if q == nil {
		return err
	}
	close(q.queue)
	if herr := <-q.done; herr != nil {
		return herr
	}
	return err
}

// absent reports whether a pull error suggests that the consumer no longer
// exists on the broker: no heartbeat, no responder, or not found.
func absent(err error) bool {
	return errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrConsumerNotFound)
}

// gone asks the broker for c and returns the gap (*errReset) that re-opens
// it at the checkpoint if the broker does not have it; nil if it has, or
// if the broker cannot answer now (the pulls go on, and the next missed
// heartbeat asks again).
func (l *loop) gone(ctx context.Context, c jetstream.Consumer) error {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.Info(ictx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return &errReset{why: "the broker no longer has the consumer"}
	}
	return nil
}

// handle runs h on batch, retrying transient failures, and acknowledges
// what it processed.
func (l *loop) handle(ctx context.Context, batch []jetstream.Msg) error {
	l.retry.Reset()
	for {
		out, err := l.h(ctx, batch)
		if err == nil {
			l.roomAgain()
			return l.ack(batch, out)
		}
		if ctx.Err() != nil {
			return nil
		}
		full := StoreFull(err)
		if !full && !errors.Is(err, ErrRetry) {
			return err
		}
		if full {
			l.storeFull(err)
		}
		d := l.retry.NextBackOff()
		if !l.spec.AckAll {
			l.o.Logger.Warn("batch failed; nak'ed for redelivery", "durable", l.spec.Durable, "err", err, "delay", d)
			for _, m := range batch {
				if err := m.NakWithDelay(d); err != nil {
					return fmt.Errorf("stream: nak: %w", err)
				}
			}
			return nil
		}
		l.o.Logger.Warn("batch failed; retrying", "durable", l.spec.Durable, "err", err, "in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// storeFull records that the broker refused the batch's outputs for a
// full store.
func (l *loop) storeFull(err error) {
	if !l.full {
		l.o.Logger.Warn("the broker's store is full: waiting for room, nothing acknowledged", "durable", l.spec.Durable, "err", err)
	}
	if l.watch != nil {
		l.watch.refused(err, !l.full)
	}
	l.full = true
}

// roomAgain ends the loop's wait for a full store, if it waited.
func (l *loop) roomAgain() {
	if !l.full {
		return
	}
	l.full = false
	l.o.Logger.Info("the broker's store took the outputs again", "durable", l.spec.Durable)
	if l.watch != nil {
		l.watch.resumed()
	}
}

// ackOne acknowledges m. An ack the connection could not send because it
// is reconnecting (no reconnect buffer: connect.ConnectNATS) is lost, not
// fatal: the message is delivered again after the ack wait and its
// handling replays as a no-op, as after a crash.
func (l *loop) ackOne(m jetstream.Msg) error {
	err := m.Ack()
	if ackLost(err) {
		l.o.Logger.Warn("ack lost while the connection reconnects; the batch will be delivered again", "durable", l.spec.Durable, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream: ack: %w", err)
	}
	return nil
}

// ackLost tells an ack that failed only because the connection was
// down at that moment.
func ackLost(err error) bool {
	return errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

// ack acknowledges a processed batch as its outcome says, and moves the
// checkpoint past it.
func (l *loop) ack(batch []jetstream.Msg, out Outcome) error {
	term := make(map[int]bool, len(out.Term))
	for _, i := range out.Term {
		if i < 0 || i >= len(batch) {
			return fmt.Errorf("stream: handler terminated message %d of a batch of %d", i, len(batch))
		}
		term[i] = true
		if err := batch[i].TermWithReason(out.TermReason); err != nil {
			return fmt.Errorf("stream: term: %w", err)
		}
	}
	last := batch[len(batch)-1]
	if l.spec.AckAll {
		if !term[len(batch)-1] {
			if err := l.ackOne(last); err != nil {
				return err
			}
		}
	} else {
		for i, m := range batch {
			if term[i] {
				continue
			}
			if err := l.ackOne(m); err != nil {
				return err
			}
		}
	}
	if meta, err := last.Metadata(); err == nil {
		l.processed = max(l.processed, meta.Sequence.Stream)
	}
	return nil
}
