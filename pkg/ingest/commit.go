package ingest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// item is one message of the single ordered sequence an Ingester writes
// to RAW: a record, or a heartbeat to one partition.
type item struct {
	msg *nats.Msg
	id  string // its Nats-Msg-Id
	// line is the record's 1-based line number; 0 for a heartbeat.
	line int64
}

// result is what RAW answered for one item: its stream sequence (the
// original's when JetStream, or this Ingester, found it a duplicate).
type result struct {
	seq uint64
	dup bool
}

// recentMax bounds the message ids a committer remembers.
const recentMax = 1 << 17

// committer stores an ordered sequence of items in RAW so that RAW holds
// them in that order (docs/spec.md §4), whatever fails in between. It sends
// them as JetStream atomic batches, one at a time: the server stores a
// batch whole or not at all, and the next batch is sent only after the one
// before it is confirmed, so no message can be stored before an earlier one
// that is not (a lost socket, a server restart, a leader change, an ack
// that timed out). A batch that is not confirmed is sent again, whole,
// under a new batch id; if the lost attempt was stored after all, its
// message ids make the server refuse the new attempt, and the head of the
// range is then confirmed one plain publish at a time (each answered
// "duplicate" with the original's sequence). A single message goes as a
// plain publish: with nothing else in flight its retries cannot reorder
// anything. Not safe for concurrent use: one goroutine (the sender) owns it.
type committer struct {
	js       jetstream.JetStream
	batchMax int
	retryFor time.Duration
	timeout  time.Duration
	// recent are ids this committer confirmed, with their sequence and
	// when the confirmed attempt was sent; fifo holds them oldest first.
	recent map[string]stored
	fifo   []recentID
}

type stored struct {
	seq uint64
	at  time.Time
}

type recentID struct {
	id string
	at time.Time
}

func newCommitter(js jetstream.JetStream, batchMax int, retryFor time.Duration) *committer {
	timeout := js.Options().DefaultTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &committer{js: js, batchMax: batchMax, retryFor: retryFor, timeout: timeout, recent: map[string]stored{}}
}

// store stores items in order and returns RAW's answer for each of the
// first n, which are confirmed (n == len(items) when err is nil). An id
// repeated within items, or one this committer confirmed less than
// stream.DefaultRecentDuplicateTrust ago (well inside JetStream's duplicate
// window, where the server would drop it too), is a duplicate and is not
// sent: the server refuses a whole atomic batch that holds one.
func (c *committer) store(ctx context.Context, items []item) (res []result, n int, err error) {
	now := time.Now()
	c.expire(now)
	res = make([]result, len(items))
	dupOf := make([]int, len(items))
	first := make(map[string]int, len(items))
	send := make([]int, 0, len(items))
	for i, it := range items {
		dupOf[i] = -1
		if j, ok := first[it.id]; ok {
			dupOf[i] = j
			continue
		}
		first[it.id] = i
		if s, ok := c.recent[it.id]; ok && now.Sub(s.at) < stream.DefaultRecentDuplicateTrust {
			res[i] = result{seq: s.seq, dup: true}
			continue
		}
		send = append(send, i)
	}
	m, err := c.storeRange(ctx, items, send, res)
	n = len(items)
	if err != nil {
		n = send[m]
	}
	for i := 0; i < n; i++ {
		if j := dupOf[i]; j >= 0 {
			res[i] = result{seq: res[j].seq, dup: true}
		}
	}
	return res, n, err
}

// storeRange stores items[send[0]], items[send[1]], ... in order, filling
// res, and returns how many of send are confirmed.
func (c *committer) storeRange(ctx context.Context, items []item, send []int, res []result) (int, error) {
	size := c.batchMax
	pos := 0
	for pos < len(send) {
		n := min(size, len(send)-pos)
		if n == 1 {
			if _, err := c.storeOne(ctx, items[send[pos]], send[pos], res); err != nil {
				return pos, err
			}
			pos++
			size = min(c.batchMax, 2*size)
			continue
		}
		part := send[pos : pos+n]
		sent, last, err := c.commitRetrying(ctx, items, part)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			// An atomic batch is stored at consecutive sequences,
			// ending at the commit's.
			for k, i := range part {
				c.confirm(items[i], i, res, last-uint64(n-1-k), false, sent)
			}
			pos += n
			size = min(c.batchMax, 2*size)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == stream.ErrCodeBatchTooLarge:
			// The server's max_batch_size is lower: remember it.
			c.batchMax = max(1, n/2)
			size = c.batchMax
		case errors.As(err, &apiErr) && apiErr.ErrorCode == stream.ErrCodeBatchDuplicate:
			// Some id of the range is stored already: most often the
			// head (a batch stored without its ack arriving, or a file
			// published again). Confirm the head one message at a
			// time while it answers "duplicate"; if the very first
			// message is new, the duplicate is further in: halve.
			walked := 0
			for pos < len(send) {
				dup, err := c.storeOne(ctx, items[send[pos]], send[pos], res)
				if err != nil {
					return pos, err
				}
				pos++
				walked++
				if !dup {
					break
				}
			}
			if walked == 1 {
				size = max(1, n/2)
			}
		case errors.As(err, &apiErr) && apiErr.ErrorCode == stream.ErrCodeBatchDisabled:
			return pos, fmt.Errorf("%w: %w", ErrAtomicDisabled, err)
		default:
			return pos, err
		}
	}
	return pos, nil
}

// storeOne stores one item with a plain publish, retried until the answer
// is definite or retryFor passes, and tells whether it was a duplicate.
func (c *committer) storeOne(ctx context.Context, it item, i int, res []result) (dup bool, err error) {
	var sent time.Time
	ack, err := stream.RetryOp(ctx, c.backoff(), stream.Retryable, c.moveOn(), func(ctx context.Context) (*jetstream.PubAck, error) {
		sent = time.Now()
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return c.js.PublishMsg(pctx, it.msg, jetstream.WithRetryAttempts(0))
	})
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", it.msg.Subject, err)
	}
	c.confirm(it, i, res, ack.Sequence, ack.Duplicate, sent)
	return ack.Duplicate, nil
}

// backoff is the schedule of the committer's retries: 50ms doubling to 1s,
// for at most retryFor.
func (c *committer) backoff() stream.Backoff {
	return stream.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, For: c.retryFor}
}

// moveOn returns the notify of one retried operation: once its attempts
// have failed for a third of retryFor, and again after each further third,
// the connection leaves its server for the next one (connect.MoveOn). A
// node cut off from its peers still answers pings but stores nothing; the
// other nodes may have a quorum, so ingest must not give up on it.
func (c *committer) moveOn() func(error, time.Duration) {
	since := time.Now()
	return func(error, time.Duration) {
		if c.retryFor <= 0 || time.Since(since) < c.retryFor/3 {
			return
		}
		since = time.Now()
		_ = connect.MoveOn(c.js.Conn())
	}
}

// commitRetrying sends items[part[0]], ... as one atomic batch until it is
// stored, refused for good, or retryFor passes. It returns when the stored
// attempt was sent and the commit's sequence (the batch's last).
func (c *committer) commitRetrying(ctx context.Context, items []item, part []int) (time.Time, uint64, error) {
	var sent time.Time
	last, err := stream.RetryOp(ctx, c.backoff(), stream.Retryable, c.moveOn(), func(ctx context.Context) (uint64, error) {
		sent = time.Now()
		return c.commit(ctx, items, part)
	})
	if err != nil {
		return sent, 0, err
	}
	return sent, last, nil
}

// commit sends one attempt of an atomic batch under a new batch id and
// waits for the commit's answer. The client's own retry is off: a message
// lost on the way makes the batch incomplete, so the server stores none of
// it. The server answers the messages before the commit with an empty ack,
// which the client reports on their futures; only the commit's counts.
func (c *committer) commit(ctx context.Context, items []item, part []int) (uint64, error) {
	var raw [16]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	last := len(part) - 1
	var f jetstream.PubAckFuture
	for k, i := range part {
		m := items[i].msg
		b := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: make(nats.Header, len(m.Header)+3)}
		for key, v := range m.Header {
			b.Header[key] = v
		}
		b.Header.Set(wire.HdrBatchID, id)
		b.Header.Set(wire.HdrBatchSeq, strconv.Itoa(k+1))
		if k == last {
			b.Header.Set(wire.HdrBatchCommit, "1")
		}
		var err error
		if f, err = c.js.PublishMsgAsync(b, jetstream.WithRetryAttempts(0)); err != nil {
			return 0, fmt.Errorf("atomic batch of %d: %w", len(part), err)
		}
	}
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	select {
	case ack := <-f.Ok():
		if ack == nil || ack.Stream == "" || ack.Sequence < uint64(len(part)) {
			return 0, fmt.Errorf("atomic batch of %d: no valid ack", len(part))
		}
		return ack.Sequence, nil
	case err := <-f.Err():
		return 0, fmt.Errorf("atomic batch of %d: %w", len(part), err)
	case <-timer.C:
		return 0, fmt.Errorf("atomic batch of %d: %w", len(part), context.DeadlineExceeded)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// confirm records RAW's answer for item i.
func (c *committer) confirm(it item, i int, res []result, seq uint64, dup bool, sent time.Time) {
	res[i] = result{seq: seq, dup: dup}
	c.recent[it.id] = stored{seq: seq, at: sent}
	c.fifo = append(c.fifo, recentID{it.id, sent})
}

// expire forgets ids older than stream.DefaultRecentDuplicateTrust, and the
// oldest beyond recentMax.
func (c *committer) expire(now time.Time) {
	drop := 0
	for drop < len(c.fifo) && (len(c.fifo)-drop > recentMax || now.Sub(c.fifo[drop].at) >= stream.DefaultRecentDuplicateTrust) {
		e := c.fifo[drop]
		if s, ok := c.recent[e.id]; ok && s.at.Equal(e.at) {
			delete(c.recent, e.id)
		}
		drop++
	}
	c.fifo = c.fifo[drop:]
}
