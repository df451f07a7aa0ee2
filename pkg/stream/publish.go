package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// PublishWindow bounds the asynchronous publishes PublishAll keeps in
// flight.
const PublishWindow = 1024

// PublishAll publishes msgs pipelined (PublishWindow in flight, atomic
// batch headers left out, no order kept across a failure) and returns once
// every one is stored, with how many were duplicates of stored ids.
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

// batchHeaders are the headers a Committer sets on the messages of a batch
// or a chained run (the server's atomic batch headers, wire.HdrBatchLasts,
// and the chain's expected last message id).
var batchHeaders = [...]string{wire.HdrBatchID, wire.HdrBatchSeq, wire.HdrBatchCommit, wire.HdrBatchLasts, jetstream.ExpectedLastMsgIDHeader}

// batchHeader reports whether key is one of batchHeaders.
func batchHeader(key string) bool { return slices.Contains(batchHeaders[:], key) }

// withoutBatchHeaders returns m, or a copy without the atomic batch headers
// that a message read back from VALID or RAW keeps: the server would take
// it, published again (a replay), for part of a batch.
func withoutBatchHeaders(m *nats.Msg) *nats.Msg {
	if !slices.ContainsFunc(batchHeaders[:], func(k string) bool { _, ok := m.Header[k]; return ok }) {
		return m
	}
	c := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: m.Data, Header: make(nats.Header, len(m.Header))}
	for k, v := range m.Header {
		if !batchHeader(k) {
			c.Header[k] = v
		}
	}
	return c
}

// NewMsg builds a message for subject with a Nats-Msg-Id.
func NewMsg(subject, msgID string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	return m
}

// GroupPublisher shares one Committer among several ordered sequences (a
// validator's partitions): calls that queue up while a batch is in flight
// go together in the next one (doc.go). Safe for concurrent use.
type GroupPublisher struct {
	c  *Committer
	mu sync.Mutex
	// queue holds the calls waiting for the next batch; leading is true
	// while one caller sends batches for all.
	queue   []*groupCall
	leading bool
	// commits counts the Commit calls made (for tests and metrics).
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

// NewGroupPublisher returns a group publisher over a Committer of js.
func NewGroupPublisher(js jetstream.JetStream, cfg CommitterConfig) *GroupPublisher {
	return &GroupPublisher{c: NewCommitter(js, cfg)}
}

// Publish stores msgs like Committer.Commit, in a batch shared with
// concurrent calls, and returns the shared batch's duplicates. If ctx ends
// first it returns ctx's error; msgs may still be stored (send them again).
func (g *GroupPublisher) Publish(ctx context.Context, msgs []*nats.Msg) (dups int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	// One caller at a time sends the queued calls, oldest first, and hands
	// that job on to the oldest waiting call once its own are stored.
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
		acks, err := g.c.Commit(ctx, all)
		d := duplicates(acks)
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

// PublishInOrder stores msgs in order per subject on a single-replica
// stream (doc.go) and returns how many were duplicates, or ErrOrderBroken
// when a message was stored after an earlier one of its subject failed.
func PublishInOrder(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (dups int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	// The first message goes alone, so the rest goes only to a stream that
	// answers; the rest is pipelined with the client's retries off, so no
	// message is sent a second time behind later ones.
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
