package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// PublishWindow bounds the asynchronous publishes PublishAll keeps in
// flight.
const PublishWindow = 1024

// PublishAll publishes msgs asynchronously, at most PublishWindow in flight,
// and waits until JetStream has stored every one. Each message should carry
// a Nats-Msg-Id header, so that publishing the same messages again (after a
// crash) stores nothing twice inside the duplicate window. It returns how
// many acks JetStream flagged as duplicates. Atomic batch headers on msgs
// (copies of messages read from VALID) are left out.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (dups int, err error) {
	futures := make([]jetstream.PubAckFuture, 0, min(len(msgs), PublishWindow))
	wait := func() error {
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					dups++
				}
			case err := <-f.Err():
				return fmt.Errorf("stream: publish %s: %w", f.Msg().Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		futures = futures[:0]
		return nil
	}
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(withoutBatchHeaders(m))
		if err != nil {
			return dups, fmt.Errorf("stream: publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
		if len(futures) == PublishWindow {
			if err := wait(); err != nil {
				return dups, err
			}
		}
	}
	return dups, wait()
}

// withoutBatchHeaders returns m, or a copy of it without the atomic batch
// headers when it has them: a message read back from a stream written in
// atomic batches (VALID) keeps them, and the server would take a copy
// published again (a replay) for part of a batch.
func withoutBatchHeaders(m *nats.Msg) *nats.Msg {
	if m.Header == nil || (m.Header.Get(wire.HdrBatchID) == "" && m.Header.Get(wire.HdrBatchSeq) == "" && m.Header.Get(wire.HdrBatchCommit) == "") {
		return m
	}
	c := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: m.Data, Header: make(nats.Header, len(m.Header))}
	for k, v := range m.Header {
		c.Header[k] = v
	}
	c.Header.Del(wire.HdrBatchID)
	c.Header.Del(wire.HdrBatchSeq)
	c.Header.Del(wire.HdrBatchCommit)
	return c
}

// NewMsg builds a message for subject with a Nats-Msg-Id.
func NewMsg(subject, msgID string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	return m
}

// AtomicBatchMax is the most messages PublishOrdered puts in one atomic
// batch: nats-server's default limit (jetstream { limits { max_batch_size
// } }, 1000). A server configured lower answers "batch is too large" and
// the batch is split.
const AtomicBatchMax = 1000

// JetStream error codes of atomic batch publishes that PublishOrdered and
// ingest's committer act on (nats-server jetstream_errors_generated.go).
const (
	ErrCodeBatchDisabled  jetstream.ErrorCode = 10174 // stream has no AllowAtomicPublish
	ErrCodeBatchTooLarge  jetstream.ErrorCode = 10199 // more than max_batch_size messages
	ErrCodeBatchDuplicate jetstream.ErrorCode = 10201 // a message id is already stored
)

// DefaultRecentDuplicateTrust is how long, unless WithRecentDuplicateTrust
// says otherwise, PublishOrdered (and ingest's committer) takes a message
// id it stored to be still inside the stream's duplicate window, and
// leaves a message with that id out of a batch instead of sending it. It
// stays below the window (Config.DupWindow, 2m by default): within it
// JetStream would drop the message anyway.
const DefaultRecentDuplicateTrust = 30 * time.Second

// recentMax bounds the ids an OrderedPublisher remembers.
const recentMax = 1 << 16

// DefaultOrderedRetryFor bounds, unless WithRetryFor says otherwise, how
// long PublishOrdered keeps retrying a batch that failed for a passing
// reason (no stream leader, a timeout, a batch lost with its leader)
// before it returns the error.
const DefaultOrderedRetryFor = 30 * time.Second

// OrderedOption sets an option of NewOrderedPublisher or
// NewGroupPublisher.
type OrderedOption func(*OrderedPublisher)

// WithRecentDuplicateTrust sets how long a message id the publisher stored
// is taken to be still inside the stream's duplicate window (default
// DefaultRecentDuplicateTrust). Keep it below the stream's DupWindow. A
// value of zero or less keeps the default.
func WithRecentDuplicateTrust(d time.Duration) OrderedOption {
	return func(o *OrderedPublisher) {
		if d > 0 {
			o.trust = d
		}
	}
}

// WithRetryFor sets how long a batch that failed for a passing reason is
// retried before PublishOrdered returns the error (default
// DefaultOrderedRetryFor). A value of zero or less keeps the default.
func WithRetryFor(d time.Duration) OrderedOption {
	return func(o *OrderedPublisher) {
		if d > 0 {
			o.retryFor = d
		}
	}
}

// OrderedPublisher writes messages to a stream that allows atomic batch
// publishing (Config, AllowAtomicPublish) so that per subject they are
// stored in the order given, across failed publishes, retries, leader
// changes and restarts: see PublishOrdered. It is safe for concurrent use,
// but calls are serialised; use one per independent ordered sequence (a
// partition).
type OrderedPublisher struct {
	js       jetstream.JetStream
	trust    time.Duration
	retryFor time.Duration
	mu       sync.Mutex
	// recent are ids stored by this publisher, with the time the batch
	// holding them was sent, oldest first in fifo.
	recent map[string]time.Time
	fifo   []recentID
}

type recentID struct {
	id string
	at time.Time
}

// NewOrderedPublisher returns a publisher over js with opts applied.
func NewOrderedPublisher(js jetstream.JetStream, opts ...OrderedOption) *OrderedPublisher {
	o := &OrderedPublisher{js: js, trust: DefaultRecentDuplicateTrust, retryFor: DefaultOrderedRetryFor, recent: map[string]time.Time{}}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// PublishOrdered stores msgs so that the messages of each subject end up
// in the stream in the order of msgs, each at most once when it carries a
// Nats-Msg-Id, and returns how many were duplicates. It does not return
// before all are stored (or it fails).
//
// The messages go as JetStream atomic batches of up to AtomicBatchMax: the
// server stages a batch and stores all of it or none of it, and only the
// commit is answered, so one batch costs one round trip and one
// replication round however large it is. A batch is sent only once the one
// before it is stored, so a failed batch is never overtaken: when its
// commit fails or times out it is sent again, whole, under a new batch id.
// If the lost attempt was stored after all, its message ids make the
// server refuse the new attempt.
//
// The server refuses a whole batch when any message id in it is already in
// the stream's duplicate window, so duplicates are taken out first: an id
// repeated within msgs, or one this publisher stored less than
// its duplicate trust ago (WithRecentDuplicateTrust), is counted as a
// duplicate and not sent. A batch
// refused for a duplicate nobody here knew of (after a restart, or a batch
// stored without its ack arriving) is resolved in order: its head is
// walked one plain publish at a time while those answer "duplicate" (a
// batch published again), the rest is tried as a batch again, and if that
// is refused too it is halved until the duplicates stand alone. A single
// message always goes as a plain publish: with nothing else in flight, its
// retries cannot reorder anything.
func (o *OrderedPublisher) PublishOrdered(ctx context.Context, msgs []*nats.Msg) (dups int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	o.expire(now)
	send := make([]*nats.Msg, 0, len(msgs))
	seen := make(map[string]struct{}, len(msgs))
	for _, m := range msgs {
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			_, again := seen[id]
			at, ok := o.recent[id]
			if again || (ok && now.Sub(at) < o.trust) {
				dups++
				continue
			}
			seen[id] = struct{}{}
		}
		send = append(send, m)
	}
	for len(send) > 0 {
		n := min(len(send), AtomicBatchMax)
		d, err := o.publishRange(ctx, send[:n])
		dups += d
		if err != nil {
			return dups, err
		}
		send = send[n:]
	}
	return dups, nil
}

// publishRange stores msgs as one atomic batch, or in order in parts when
// the server refuses it for a duplicate or its size.
func (o *OrderedPublisher) publishRange(ctx context.Context, msgs []*nats.Msg) (dups int, err error) {
	if len(msgs) <= 1 {
		return o.publishEach(ctx, msgs)
	}
	refused, dups, err := o.tryRange(ctx, msgs)
	if err != nil || !refused {
		return dups, err
	}
	// The batch holds an id the stream has. Most often it was stored
	// before and is published again (redelivered after a crash, or its
	// ack was lost): walk its head one message at a time, each a plain
	// publish that answers "duplicate", up to the first new message. One
	// message in flight cannot be overtaken.
	i := 0
	for i < len(msgs) {
		dup, err := o.publishOne(ctx, msgs[i])
		if err != nil {
			return dups, err
		}
		i++
		if !dup {
			break
		}
		dups++
	}
	rest := msgs[i:]
	if len(rest) <= 1 {
		d, err := o.publishEach(ctx, rest)
		return dups + d, err
	}
	refused, d, err := o.tryRange(ctx, rest)
	if dups += d; err != nil || !refused {
		return dups, err
	}
	// Duplicates further in: halve until they stand alone.
	half := len(rest) / 2
	d, err = o.publishRange(ctx, rest[:half])
	dups += d
	if err != nil {
		return dups, err
	}
	d, err = o.publishRange(ctx, rest[half:])
	return dups + d, err
}

// publishEach publishes msgs one at a time (publishOne).
func (o *OrderedPublisher) publishEach(ctx context.Context, msgs []*nats.Msg) (dups int, err error) {
	for _, m := range msgs {
		dup, err := o.publishOne(ctx, m)
		if err != nil {
			return dups, err
		}
		if dup {
			dups++
		}
	}
	return dups, nil
}

// tryRange stores msgs (two or more) as one atomic batch (in halves, in
// order, when it is too large for the server). refused tells that the
// server refused it for holding a stored message id; nothing of it is
// stored then.
func (o *OrderedPublisher) tryRange(ctx context.Context, msgs []*nats.Msg) (refused bool, dups int, err error) {
	sent, err := o.commitRetrying(ctx, msgs)
	if err == nil {
		o.remember(msgs, sent)
		return false, 0, nil
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false, 0, err
	}
	switch apiErr.ErrorCode {
	case ErrCodeBatchDuplicate:
		return true, 0, nil
	case ErrCodeBatchTooLarge:
		half := len(msgs) / 2
		d, err := o.publishRange(ctx, msgs[:half])
		if err != nil {
			return false, d, err
		}
		d2, err := o.publishRange(ctx, msgs[half:])
		return false, d + d2, err
	}
	return false, 0, err
}

// publishOne stores m with a plain publish, retried until the answer is
// definite, and tells whether it was a duplicate. With nothing else in
// flight a retry cannot reorder anything.
func (o *OrderedPublisher) publishOne(ctx context.Context, m *nats.Msg) (dup bool, err error) {
	var sent time.Time
	ack, err := RetryOp(ctx, o.backoff(), retryableHere, nil, func(ctx context.Context) (*jetstream.PubAck, error) {
		sent = time.Now()
		return o.publishAsync(ctx, withoutBatchHeaders(m))
	})
	if err != nil {
		return false, fmt.Errorf("stream: publish %s: %w", m.Subject, err)
	}
	o.remember([]*nats.Msg{m}, sent)
	return ack.Duplicate, nil
}

// commitRetrying sends msgs as one atomic batch until it is stored, the
// server refuses it for good, or the publisher's retry bound passes. It returns when
// the successful attempt was sent.
func (o *OrderedPublisher) commitRetrying(ctx context.Context, msgs []*nats.Msg) (time.Time, error) {
	var sent time.Time
	_, err := RetryOp(ctx, o.backoff(), retryableHere, nil, func(ctx context.Context) (struct{}, error) {
		sent = time.Now()
		return struct{}{}, o.commit(ctx, msgs)
	})
	return sent, err
}

// backoff is the schedule of o's retries: 50ms doubling to 1s, for at most
// its retry span (DefaultOrderedRetryFor unless set).
func (o *OrderedPublisher) backoff() Backoff {
	return Backoff{Initial: 50 * time.Millisecond, Max: time.Second, For: o.retryFor}
}

// Retryable tells a passing failure of a publish (no stream leader yet, a
// lost connection, a timeout, a batch lost with its server, a full store:
// StoreFull) from a refusal that another attempt cannot change (false).
func Retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case ErrCodeBatchDuplicate, ErrCodeBatchTooLarge, ErrCodeBatchDisabled,
			10175, // missing batch sequence
			10177, // unsupported header in a batch
			10179, // invalid batch id
			10200: // invalid commit
			return false
		}
		return true
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, nats.ErrConnectionClosed)
}

// retryableHere is what OrderedPublisher retries itself: Retryable but a
// full store, which it hands back at once for the consume loop to wait
// out (and report: StoreWatch).
func retryableHere(err error) bool { return Retryable(err) && !StoreFull(err) }

// commit sends msgs as one atomic batch under a new batch id and waits for
// the commit's answer. Every message goes through js.PublishMsgAsync (so a
// wrapped JetStream, such as the replay's, sees each one), without the
// client's retry: a message lost on the way (no leader yet) makes the batch
// incomplete, so the commit fails and nothing of it is stored. The server
// answers the messages before the commit with an empty ack, which the
// client reports as an error on their futures; only the commit's counts.
func (o *OrderedPublisher) commit(ctx context.Context, msgs []*nats.Msg) error {
	var raw [16]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	last := len(msgs) - 1
	var f jetstream.PubAckFuture
	for i, m := range msgs {
		c := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: make(nats.Header, len(m.Header)+3)}
		for k, v := range m.Header {
			c.Header[k] = append([]string(nil), v...)
		}
		c.Header.Set(wire.HdrBatchID, id)
		c.Header.Set(wire.HdrBatchSeq, strconv.Itoa(i+1))
		c.Header.Del(wire.HdrBatchCommit)
		if i == last {
			c.Header.Set(wire.HdrBatchCommit, "1")
		}
		var err error
		if f, err = o.js.PublishMsgAsync(c, jetstream.WithRetryAttempts(0)); err != nil {
			return fmt.Errorf("stream: atomic batch %s: %w", m.Subject, err)
		}
	}
	subject := msgs[last].Subject
	timer := time.NewTimer(o.js.Options().DefaultTimeout)
	defer timer.Stop()
	select {
	case ack := <-f.Ok():
		if ack == nil || ack.Stream == "" {
			return fmt.Errorf("stream: atomic batch of %d to %s: no ack", len(msgs), subject)
		}
		return nil
	case err := <-f.Err():
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeBatchDisabled {
			return fmt.Errorf("stream: atomic batch to %s: %w (the stream needs AllowAtomicPublish: run the set-up job, stream.Ensure)", subject, err)
		}
		return fmt.Errorf("stream: atomic batch of %d to %s: %w", len(msgs), subject, err)
	case <-timer.C:
		return fmt.Errorf("stream: atomic batch of %d to %s: %w", len(msgs), subject, context.DeadlineExceeded)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publishAsync publishes m through js.PublishMsgAsync (so a wrapped
// JetStream sees it) and waits for its ack.
func (o *OrderedPublisher) publishAsync(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	f, err := o.js.PublishMsgAsync(m)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(o.js.Options().DefaultTimeout)
	defer timer.Stop()
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-timer.C:
		return nil, context.DeadlineExceeded
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// remember records the ids of msgs, stored in a batch sent at sent.
func (o *OrderedPublisher) remember(msgs []*nats.Msg, sent time.Time) {
	for _, m := range msgs {
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			o.recent[id] = sent
			o.fifo = append(o.fifo, recentID{id, sent})
		}
	}
	o.expire(time.Now())
}

// expire forgets ids older than the duplicate trust, and the oldest ones
// beyond recentMax.
func (o *OrderedPublisher) expire(now time.Time) {
	drop := 0
	for drop < len(o.fifo) && (len(o.fifo)-drop > recentMax || now.Sub(o.fifo[drop].at) >= o.trust) {
		e := o.fifo[drop]
		if at, ok := o.recent[e.id]; ok && at.Equal(e.at) {
			delete(o.recent, e.id)
		}
		drop++
	}
	// Appending past the capacity copies only what is left.
	o.fifo = o.fifo[drop:]
}

// GroupPublisher shares one OrderedPublisher among several ordered
// sequences (a validator's partitions) and commits what they hand in at
// the same moment as one atomic batch. Each call still returns only once
// its messages are stored, so a caller that waits for one call before the
// next keeps its order; calls that queue up while a batch is in flight go
// together in the next one. On a single-replica file stream every atomic
// batch is staged in a store of its own and synced, so one commit for all
// partitions instead of one each is most of the validator's cost at low
// and medium load.
type GroupPublisher struct {
	op *OrderedPublisher
	mu sync.Mutex
	// queue holds the calls waiting for the next batch; leading is true
	// while one caller sends batches for all.
	queue   []*groupCall
	leading bool
	// Commits counts the PublishOrdered calls made (for tests and metrics).
	commits int
}

type groupCall struct {
	msgs []*nats.Msg
	dups int
	err  error
	done chan struct{}
	// lead is signalled when this waiting call is to send batches next.
	lead chan struct{}
}

// NewGroupPublisher returns a group publisher over js; opts are those of
// NewOrderedPublisher.
func NewGroupPublisher(js jetstream.JetStream, opts ...OrderedOption) *GroupPublisher {
	return &GroupPublisher{op: NewOrderedPublisher(js, opts...)}
}

// Publish stores msgs like OrderedPublisher.PublishOrdered, sharing the
// atomic batch with concurrent calls. The duplicates count is the whole
// shared batch's when calls were grouped. One caller at a time sends the
// queued calls, oldest first, and hands that job on to the oldest waiting
// call once its own messages are stored. If ctx ends while the call waits,
// Publish returns ctx's error; its messages may still be stored later (a
// caller retries, as after any failed publish).
func (g *GroupPublisher) Publish(ctx context.Context, msgs []*nats.Msg) (dups int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c := &groupCall{msgs: msgs, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.leading {
		g.mu.Unlock()
		select {
		case <-c.done:
			return c.dups, c.err
		case <-c.lead:
		case <-ctx.Done():
			g.mu.Lock()
			g.drop(c)
			select {
			case <-c.lead: // handed the job as it left: pass it on
				g.handOn()
			default:
			}
			g.mu.Unlock()
			return 0, ctx.Err()
		}
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	for {
		g.mu.Lock()
		if ctx.Err() != nil {
			// Do not send the others' messages under an ended context:
			// leave, and hand the job on.
			g.drop(c)
			g.handOn()
			g.mu.Unlock()
			return 0, ctx.Err()
		}
		take, n := 0, 0
		for take < len(g.queue) && (take == 0 || n+len(g.queue[take].msgs) <= AtomicBatchMax) {
			n += len(g.queue[take].msgs)
			take++
		}
		calls := append([]*groupCall(nil), g.queue[:take]...)
		g.queue = g.queue[take:]
		g.commits++
		g.mu.Unlock()
		all := calls[0].msgs
		if len(calls) > 1 {
			all = make([]*nats.Msg, 0, n)
			for _, gc := range calls {
				all = append(all, gc.msgs...)
			}
		}
		d, err := g.op.PublishOrdered(ctx, all)
		mine := false
		for _, gc := range calls {
			gc.dups, gc.err = d, err
			close(gc.done)
			mine = mine || gc == c
		}
		if mine {
			g.mu.Lock()
			g.handOn()
			g.mu.Unlock()
			return c.dups, c.err
		}
	}
}

// handOn gives the sending job to the oldest waiting call, or ends it.
// g.mu is held.
func (g *GroupPublisher) handOn() {
	if len(g.queue) == 0 {
		g.leading = false
		return
	}
	g.queue[0].lead <- struct{}{}
}

// drop takes c out of the queue if it is still there. g.mu is held.
func (g *GroupPublisher) drop(c *groupCall) {
	for i, q := range g.queue {
		if q == c {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return
		}
	}
}

// Commits is how many shared batches were sent.
func (g *GroupPublisher) Commits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commits
}

// ErrOrderBroken reports that a message was stored after an earlier one of
// the same subject failed: the subject is out of order, and no retry can
// repair it (docs/recovery.md: rebuild into a new generation).
var ErrOrderBroken = errors.New("stream: subject order broken")

// PublishInOrder stores msgs in order per subject on a stream kept by one
// server (one replica), where JetStream stores one connection's messages
// in the order it receives them. Its first message goes alone and is
// awaited, so the rest is sent only to a stream that answers; the rest is
// pipelined with the client's retries off, so no message is sent a second
// time behind later ones. Should a message fail while a later one of its
// subject was stored (the stream became available between the two), it
// returns ErrOrderBroken instead of letting a retry store it out of order.
// On a replicated stream a leader change can do exactly that: use
// OrderedPublisher there.
func PublishInOrder(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (dups int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	ack, err := js.PublishMsg(ctx, withoutBatchHeaders(msgs[0]), jetstream.WithRetryAttempts(0))
	if err != nil {
		return 0, fmt.Errorf("stream: publish %s: %w", msgs[0].Subject, err)
	}
	if ack.Duplicate {
		dups++
	}
	rest := msgs[1:]
	futures := make([]jetstream.PubAckFuture, 0, min(len(rest), PublishWindow))
	failed := map[string]error{} // subject -> first failure
	var firstErr error
	wait := func() error {
		for _, f := range futures {
			select {
			case a := <-f.Ok():
				if a.Duplicate {
					dups++
				}
				if e, ok := failed[f.Msg().Subject]; ok {
					return fmt.Errorf("%w: %s stored %s after an earlier message failed (%v)",
						ErrOrderBroken, f.Msg().Subject, f.Msg().Header.Get(jetstream.MsgIDHeader), e)
				}
			case err := <-f.Err():
				if _, ok := failed[f.Msg().Subject]; !ok {
					failed[f.Msg().Subject] = err
				}
				if firstErr == nil {
					firstErr = fmt.Errorf("stream: publish %s: %w", f.Msg().Subject, err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		futures = futures[:0]
		return nil
	}
	for _, m := range rest {
		f, err := js.PublishMsgAsync(withoutBatchHeaders(m), jetstream.WithRetryAttempts(0))
		if err != nil {
			if werr := wait(); werr != nil {
				return dups, werr
			}
			return dups, fmt.Errorf("stream: publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
		if len(futures) == PublishWindow {
			if err := wait(); err != nil {
				return dups, err
			}
			if firstErr != nil {
				return dups, firstErr
			}
		}
	}
	if err := wait(); err != nil {
		return dups, err
	}
	return dups, firstErr
}
