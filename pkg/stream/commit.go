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

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// AtomicBatchMax is nats-server's default max_batch_size (1000): the most
// messages a Committer puts in one atomic batch unless told fewer.
const AtomicBatchMax = 1000

// JetStream error codes of atomic batch publishes that a Committer acts on
// (nats-server jetstream_errors_generated.go).
const (
	ErrCodeBatchDisabled  jetstream.ErrorCode = 10174 // stream has no AllowAtomicPublish
	ErrCodeBatchTooLarge  jetstream.ErrorCode = 10199 // more than max_batch_size messages
	ErrCodeBatchDuplicate jetstream.ErrorCode = 10201 // a message id is already stored
	ErrCodeWrongLastMsgID jetstream.ErrorCode = 10070 // Nats-Expected-Last-Msg-Id is not the last message's
)

// DefaultRecentDuplicateTrust is CommitterConfig.DuplicateTrust's default,
// kept below the stream's duplicate window (Config.DupWindow, 2m by default).
const DefaultRecentDuplicateTrust = 30 * time.Second

// DefaultCommitRetryFor is CommitterConfig.RetryFor's default.
const DefaultCommitRetryFor = 30 * time.Second

// recentMax bounds the message ids a Committer remembers.
const recentMax = 1 << 17

// CommitterConfig configures a Committer. The zero value is usable: every
// field of zero or less takes its default.
type CommitterConfig struct {
	// BatchMax bounds the messages of one atomic batch (default
	// AtomicBatchMax); a server configured lower is detected and followed.
	BatchMax int
	// RetryFor bounds how long a batch (or a single message) that failed
	// for a passing reason is retried before Commit returns the error
	// (default DefaultCommitRetryFor).
	RetryFor time.Duration
	// DuplicateTrust is how long an id the Committer stored is taken to be
	// inside the stream's duplicate window, and left out of later batches
	// (default DefaultRecentDuplicateTrust). Keep it below the DupWindow.
	DuplicateTrust time.Duration
	// RetryStoreFull retries a full store (StoreFull) for RetryFor, as a
	// passing failure. Otherwise it is returned at once, for a consume loop
	// to wait out and report (StoreWatch).
	RetryStoreFull bool
	// MoveOn makes the connection leave its server for the next one
	// (connect.MoveOn) after each third of RetryFor that attempts fail: a
	// node cut off from its peers answers pings but stores nothing.
	MoveOn bool
	// SubjectLasts sets wire.HdrBatchLasts on the commit message of every
	// atomic batch: where each subject's messages of the batch end (the
	// validator's barrier reads it on RAW).
	SubjectLasts bool
	// WhileStream, when set, names the stream the Committer writes: once
	// RetryFor has passed on passing failures other than a full store, the
	// retries start again if the stream's leader answers STREAM.INFO within
	// another RetryFor. A leader answering means a quorum is reachable
	// (docs/spec.md §4: never give up while a quorum is reachable); only
	// when none answers for that long does Commit give up.
	WhileStream string
	// ChainIfOneReplica, when set, names the stream the Committer writes:
	// while its STREAM.INFO shows one replica, the messages go as chained
	// runs of pipelined plain publishes instead of atomic batches (doc.go,
	// "Chained runs"): the server stages every atomic batch of a
	// one-replica file stream in a synced store of its own, most of the
	// cost of a small batch. A replicated stream checks a chain against
	// what its leader has applied, not proposed, and would refuse most of
	// a run. The info is asked before the first commit and again after a
	// failed attempt; without an answer, atomic batches, which are right
	// on any stream. Chained messages need a Nats-Msg-Id each, and carry
	// no wire.HdrBatchLasts (SubjectLasts).
	ChainIfOneReplica string
}

func (c CommitterConfig) withDefaults() CommitterConfig {
	if c.BatchMax <= 0 {
		c.BatchMax = AtomicBatchMax
	}
	if c.RetryFor <= 0 {
		c.RetryFor = DefaultCommitRetryFor
	}
	if c.DuplicateTrust <= 0 {
		c.DuplicateTrust = DefaultRecentDuplicateTrust
	}
	return c
}

// Ack is the stream's answer for one message a Committer stored: its
// sequence, the original's when the message was a duplicate.
type Ack struct {
	Seq       uint64
	Duplicate bool
}

// Committer stores ordered sequences of messages in a stream in the order
// given, each once per Nats-Msg-Id, whatever fails in between (doc.go,
// "Ordered atomic commits"). Safe for concurrent use; calls are serialised.
type Committer struct {
	js      jetstream.JetStream
	cfg     CommitterConfig
	timeout time.Duration

	mu sync.Mutex
	// chained is whether runs are chained, known once the stream answered
	// (ChainIfOneReplica).
	chained, chainKnown bool
	// lastSeen is the highest stream sequence the Committer knows stored:
	// the stream's last when it was looked up, and every ack since.
	lastSeen uint64
	// recent are the ids this Committer confirmed, with their sequence and
	// when the confirmed attempt was sent; fifo holds them oldest first.
	recent map[string]recentAck
	fifo   []recentID
}

type recentAck struct {
	seq uint64
	at  time.Time
}

type recentID struct {
	id string
	at time.Time
}

// NewCommitter returns a Committer writing through js.
func NewCommitter(js jetstream.JetStream, cfg CommitterConfig) *Committer {
	timeout := js.Options().DefaultTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Committer{js: js, cfg: cfg.withDefaults(), timeout: timeout, recent: map[string]recentAck{}}
}

// Commit stores msgs in order and returns the stream's answer for each one
// confirmed: all of msgs when err is nil, else a prefix (msgs[len(acks)] is
// the first not confirmed; sent again, the stored ones come back duplicates).
func (c *Committer) Commit(ctx context.Context, msgs []*nats.Msg) (acks []Ack, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.expire(now)
	acks = make([]Ack, len(msgs))
	dupOf := make([]int, len(msgs))
	first := make(map[string]int, len(msgs))
	send := make([]int, 0, len(msgs))
	for i, m := range msgs {
		dupOf[i] = -1
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id != "" {
			if j, ok := first[id]; ok {
				dupOf[i] = j
				continue
			}
			first[id] = i
			if r, ok := c.recent[id]; ok && now.Sub(r.at) < c.cfg.DuplicateTrust {
				acks[i] = Ack{Seq: r.seq, Duplicate: true}
				continue
			}
		}
		send = append(send, i)
	}
	sent, err := c.storeRange(ctx, msgs, send, acks)
	n := len(msgs)
	if err != nil {
		n = send[sent]
	}
	for i := 0; i < n; i++ {
		if j := dupOf[i]; j >= 0 {
			acks[i] = Ack{Seq: acks[j].Seq, Duplicate: true}
		}
	}
	return acks[:n], err
}

// duplicates counts the acks that were duplicates.
func duplicates(acks []Ack) int {
	n := 0
	for _, a := range acks {
		if a.Duplicate {
			n++
		}
	}
	return n
}

// storeRange stores msgs[send[0]], msgs[send[1]], ... in order, filling
// acks, and returns how many of send are confirmed.
func (c *Committer) storeRange(ctx context.Context, msgs []*nats.Msg, send []int, acks []Ack) (int, error) {
	pos := 0
	if c.chain(ctx) {
		n, err := c.chainRange(ctx, msgs, send, acks)
		if !errors.Is(err, errUnchained) {
			return n, err
		}
		pos = n
	}
	size := c.cfg.BatchMax
	for pos < len(send) {
		n := min(size, len(send)-pos)
		if n == 1 {
			if _, err := c.storeOne(ctx, msgs, send[pos], acks); err != nil {
				return pos, err
			}
			pos++
			size = min(c.cfg.BatchMax, 2*size)
			continue
		}
		part := send[pos : pos+n]
		sent, last, err := c.commitRetrying(ctx, msgs, part)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			// An atomic batch is stored at consecutive sequences, ending
			// at the commit's.
			for k, i := range part {
				c.confirm(msgs[i], i, acks, Ack{Seq: last - uint64(n-1-k)}, sent)
			}
			pos += n
			size = min(c.cfg.BatchMax, 2*size)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeBatchTooLarge:
			// The server's max_batch_size is lower: remember it.
			c.cfg.BatchMax = max(1, n/2)
			size = c.cfg.BatchMax
		case errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeBatchDuplicate:
			walked, err := c.walkDuplicates(ctx, msgs, send[pos:], acks)
			pos += walked
			if err != nil {
				return pos, err
			}
			if walked == 1 {
				size = max(1, n/2)
			}
		default:
			return pos, err
		}
	}
	return pos, nil
}

// chain reports whether this commit sends chained runs: Chain, or a
// ChainIfOneReplica stream that shows one replica.
func (c *Committer) chain(ctx context.Context) bool {
	if c.cfg.ChainIfOneReplica == "" {
		return false
	}
	if !c.chainKnown {
		ictx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		if st, err := c.js.Stream(ictx, c.cfg.ChainIfOneReplica); err == nil {
			info := st.CachedInfo()
			c.chained, c.chainKnown = info.Config.Replicas <= 1, true
			c.lastSeen = max(c.lastSeen, info.State.LastSeq)
		}
	}
	return c.chained && c.chainKnown
}

// Chained reports whether the last commit sent chained runs (false before
// the first).
func (c *Committer) Chained() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chained && c.chainKnown
}

// chainRange stores msgs[send[0]], ... as chained runs of at most
// BatchMax messages, filling acks, and returns how many of send are
// confirmed. A run broken by another writer's message goes on at once
// from its first unconfirmed message; any other failure is retried on the
// Committer's schedule from there.
func (c *Committer) chainRange(ctx context.Context, msgs []*nats.Msg, send []int, acks []Ack) (int, error) {
	for _, i := range send {
		if msgs[i].Header.Get(jetstream.MsgIDHeader) == "" {
			return 0, fmt.Errorf("stream: chained publish to %s: a message has no %s", msgs[i].Subject, jetstream.MsgIDHeader)
		}
	}
	done := 0
	// After an unsure run, its messages are sent again asking for every
	// ack (up to everyUntil). Those it stored without acks come back
	// duplicates, each where the run put it: right after the run's first
	// message, one after the other (ours, by index of send; 0: nowhere).
	// They are reported new; a duplicate anywhere else was stored before.
	everyUntil := 0
	var ours []uint64
	_, err := retryWhileStream(ctx, c, func(ctx context.Context) (struct{}, error) {
		for done < len(send) {
			end := min(len(send), done+c.cfg.BatchMax)
			every := done < everyUntil
			if every {
				end = min(end, everyUntil)
			}
			var o []uint64
			if ours != nil {
				o = ours[done:end]
			}
			known := c.lastSeen
			k, first, err := c.chainRun(ctx, msgs, send[done:end], acks, every, o)
			unsure := errors.Is(err, errRunUnsure)
			if unsure {
				if ours == nil {
					ours = make([]uint64, len(send))
				}
				for j := 1; j < end-done; j++ {
					if seq := first + uint64(j); seq > known {
						ours[done+j] = seq
					}
				}
				everyUntil = max(everyUntil, end)
			}
			done += k
			if err != nil && !(k > 0 && (chainBroken(err) || unsure)) {
				// The stream may have been given replicas meanwhile:
				// the rest goes in atomic batches.
				c.chainKnown = false
				if !c.chain(ctx) && c.chainKnown {
					return struct{}{}, errUnchained
				}
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return done, err
}

// chainRun sends one run, pipelined with the client's retries off:
// msgs[part[0]] as it is, every later one with Nats-Expected-Last-Msg-Id
// of the one before, so that the stream refuses a message whose
// predecessor is not its last one, and nothing is stored past a message
// that was not. Only the first and the last message ask for an ack
// (every: each one): the last one stored new right after the first one,
// at its sequence plus the run's length less one, means that every one
// between was stored new, one after the other (doc.go, "Chained runs");
// any other answer is errRunUnsure (with the first one's sequence), and
// the rest is sent again asking for every ack, the stored ones coming
// back duplicates at the sequences ours names (reported new). It returns
// how many of part are confirmed (a prefix) and the first failure.
func (c *Committer) chainRun(ctx context.Context, msgs []*nats.Msg, part []int, acks []Ack, every bool, ours []uint64) (n int, first uint64, err error) {
	sent := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, len(part))
	last := len(part) - 1
	var sendErr error
	for k, i := range part {
		m := withoutBatchHeaders(msgs[i]) // a copy only if a former send left its headers
		if k > 0 {
			// Set in place (the message is encoded when published): every
			// later send of it sets the expectation again or leaves it out.
			m.Header[jetstream.ExpectedLastMsgIDHeader] = []string{msgs[part[k-1]].Header.Get(jetstream.MsgIDHeader)}
		}
		if every || k == 0 || k == last {
			f, err := c.js.PublishMsgAsync(m, jetstream.WithRetryAttempts(0))
			if err != nil {
				sendErr = fmt.Errorf("stream: chained publish to %s: %w", m.Subject, err)
				break
			}
			futures = append(futures, f)
		} else if err := c.js.Conn().PublishMsg(m); err != nil {
			sendErr = fmt.Errorf("stream: chained publish to %s: %w", m.Subject, err)
			break
		}
	}
	if every {
		for k, f := range futures {
			ack, err := c.await(ctx, f)
			if err != nil {
				return k, 0, fmt.Errorf("stream: chained publish to %s: %w", msgs[part[k]].Subject, err)
			}
			dup := ack.Duplicate && (ours == nil || ours[k] == 0 || ack.Sequence != ours[k])
			c.confirm(msgs[part[k]], part[k], acks, Ack{Seq: ack.Sequence, Duplicate: dup}, sent)
		}
		if sendErr != nil {
			return len(futures), 0, sendErr
		}
		return len(part), 0, nil
	}
	if len(futures) == 0 {
		return 0, 0, sendErr
	}
	head, err := c.await(ctx, futures[0])
	if err != nil {
		return 0, 0, fmt.Errorf("stream: chained publish to %s: %w", msgs[part[0]].Subject, err)
	}
	c.confirm(msgs[part[0]], part[0], acks, Ack{Seq: head.Sequence, Duplicate: head.Duplicate}, sent)
	if last == 0 {
		return 1, 0, nil
	}
	if sendErr != nil || len(futures) < 2 {
		return 1, head.Sequence, errors.Join(errRunUnsure, sendErr)
	}
	end, err := c.await(ctx, futures[1])
	if err != nil || head.Duplicate || end.Duplicate || end.Sequence != head.Sequence+uint64(last) {
		return 1, head.Sequence, errors.Join(errRunUnsure, err)
	}
	for k := 1; k <= last; k++ {
		c.confirm(msgs[part[k]], part[k], acks, Ack{Seq: head.Sequence + uint64(k)}, sent)
	}
	return len(part), 0, nil
}

// errRunUnsure reports a chained run whose last ack does not show every
// message between stored new.
var errRunUnsure = errors.New("stream: chained run not confirmed whole")

// errUnchained ends chained runs on a stream that now has replicas.
var errUnchained = errors.New("stream: no longer one replica")

// chainBroken reports a chained message refused because the stream's last
// message was not its predecessor: another writer's message came between,
// or the predecessor was refused.
func chainBroken(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeWrongLastMsgID
}

// walkDuplicates stores send's head one plain publish at a time while the
// stream answers "duplicate" (a batch refused for a stored id most often
// repeats a stored head), up to the first new message; it returns how many.
func (c *Committer) walkDuplicates(ctx context.Context, msgs []*nats.Msg, send []int, acks []Ack) (int, error) {
	for k, i := range send {
		dup, err := c.storeOne(ctx, msgs, i, acks)
		if err != nil {
			return k, err
		}
		if !dup {
			return k + 1, nil
		}
	}
	return len(send), nil
}

// storeOne stores msgs[i] with a plain publish, retried until the answer
// is definite, and tells whether it was a duplicate. With nothing else in
// flight a retry cannot reorder anything.
func (c *Committer) storeOne(ctx context.Context, msgs []*nats.Msg, i int, acks []Ack) (dup bool, err error) {
	m := msgs[i]
	var sent time.Time
	ack, err := retryWhileStream(ctx, c, func(ctx context.Context) (*jetstream.PubAck, error) {
		sent = time.Now()
		f, err := c.js.PublishMsgAsync(withoutBatchHeaders(m), jetstream.WithRetryAttempts(0))
		if err != nil {
			return nil, err
		}
		return c.await(ctx, f)
	})
	if err != nil {
		return false, fmt.Errorf("stream: publish %s: %w", m.Subject, err)
	}
	c.confirm(m, i, acks, Ack{Seq: ack.Sequence, Duplicate: ack.Duplicate}, sent)
	return ack.Duplicate, nil
}

// commitRetrying sends msgs[part[0]], ... as one atomic batch until it is
// stored, refused for good, or RetryFor passes. It returns when the stored
// attempt was sent and the commit's sequence (the batch's last).
func (c *Committer) commitRetrying(ctx context.Context, msgs []*nats.Msg, part []int) (time.Time, uint64, error) {
	var sent time.Time
	last, err := retryWhileStream(ctx, c, func(ctx context.Context) (uint64, error) {
		sent = time.Now()
		return c.commit(ctx, msgs, part)
	})
	return sent, last, err
}

// retryWhileStream is RetryOp of op on c's schedule, again for another
// RetryFor each time it gives up on a passing failure (not a full store)
// while CommitterConfig.WhileStream's leader answers.
func retryWhileStream[T any](ctx context.Context, c *Committer, op func(context.Context) (T, error)) (T, error) {
	for {
		v, err := RetryOp(ctx, c.backoff(), c.retryable, c.moveOn(), op)
		if err == nil || c.cfg.WhileStream == "" || ctx.Err() != nil || !c.retryable(err) || StoreFull(err) || !c.streamAnswers(ctx) {
			return v, err
		}
	}
}

// streamAnswers reports whether, within another RetryFor, WhileStream's
// STREAM.INFO shows a quorum: a leader, and more than half of the replicas
// current and online (each request bounded, the connection moving on as
// for a publish). A node left alone may still answer for a stream it led;
// its answer then shows the others gone.
func (c *Committer) streamAnswers(ctx context.Context) bool {
	_, err := RetryOp(ctx, c.backoff(), connect.Transient, c.moveOn(), func(ctx context.Context) (jetstream.Stream, error) {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := c.js.Stream(ictx, c.cfg.WhileStream)
		if err != nil {
			return nil, err
		}
		if !quorum(st.CachedInfo().Cluster) {
			return nil, fmt.Errorf("%w: stream %s shows no quorum", connect.ErrNotYet, c.cfg.WhileStream)
		}
		return st, nil
	})
	return err == nil
}

// quorum reports whether a stream's cluster information shows a leader
// with more than half of its peers (itself included) current and online;
// a stream of one replica needs only its leader.
func quorum(ci *jetstream.ClusterInfo) bool {
	if ci == nil {
		return true // not clustered: the server that answered holds it
	}
	if ci.Leader == "" {
		return false
	}
	up := 1
	for _, r := range ci.Replicas {
		if r != nil && r.Current && !r.Offline {
			up++
		}
	}
	return 2*up > 1+len(ci.Replicas)
}

// commit sends one attempt of an atomic batch under a new batch id and
// returns the commit's sequence. Each message goes through js (a wrapped
// JetStream, as the replay's, sees it) without the client's retry.
func (c *Committer) commit(ctx context.Context, msgs []*nats.Msg, part []int) (uint64, error) {
	var raw [16]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	last := len(part) - 1
	var lasts string
	if c.cfg.SubjectLasts {
		subjects := make([]string, len(part))
		for k, i := range part {
			subjects[k] = msgs[i].Subject
		}
		lasts = wire.FormatBatchLasts(subjects)
	}
	var f jetstream.PubAckFuture
	for k, i := range part {
		m := msgs[i]
		b := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: make(nats.Header, len(m.Header)+4)}
		for key, v := range m.Header {
			if !batchHeader(key) {
				b.Header[key] = v
			}
		}
		b.Header.Set(wire.HdrBatchID, id)
		b.Header.Set(wire.HdrBatchSeq, strconv.Itoa(k+1))
		if k == last {
			b.Header.Set(wire.HdrBatchCommit, "1")
			if lasts != "" {
				b.Header.Set(wire.HdrBatchLasts, lasts)
			}
		}
		// A message lost on the way leaves the batch incomplete, and the
		// server stores none of it; only the commit's ack counts.
		var err error
		if f, err = c.js.PublishMsgAsync(b, jetstream.WithRetryAttempts(0)); err != nil {
			return 0, fmt.Errorf("stream: atomic batch of %d to %s: %w", len(part), m.Subject, err)
		}
	}
	subject := msgs[part[last]].Subject
	ack, err := c.await(ctx, f)
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeBatchDisabled:
		return 0, fmt.Errorf("stream: atomic batch to %s: %w (the stream needs AllowAtomicPublish: run the set-up job, stream.Ensure)", subject, err)
	case err != nil && ctx.Err() != nil:
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("stream: atomic batch of %d to %s: %w", len(part), subject, err)
	case ack == nil || ack.Stream == "" || ack.Sequence < uint64(len(part)):
		return 0, fmt.Errorf("stream: atomic batch of %d to %s: no valid ack", len(part), subject)
	}
	return ack.Sequence, nil
}

// await waits for f's answer, for at most the client's default timeout.
func (c *Committer) await(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	timer := time.NewTimer(c.timeout)
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

// retryable is what the Committer retries itself: Retryable, and a full
// store only with RetryStoreFull.
func (c *Committer) retryable(err error) bool {
	return !errors.Is(err, errUnchained) && Retryable(err) && (c.cfg.RetryStoreFull || !StoreFull(err))
}

// backoff is the schedule of the retries: 50ms doubling to 1s, for at most
// RetryFor.
func (c *Committer) backoff() Backoff {
	return Backoff{Initial: 50 * time.Millisecond, Max: time.Second, For: c.cfg.RetryFor}
}

// moveOn returns the notify of one retried operation: with MoveOn, once
// its attempts have failed for a third of RetryFor, and after each further
// third, the connection leaves its server for the next one.
func (c *Committer) moveOn() func(error, time.Duration) {
	if !c.cfg.MoveOn {
		return nil
	}
	since := time.Now()
	return func(error, time.Duration) {
		if time.Since(since) < c.cfg.RetryFor/3 {
			return
		}
		since = time.Now()
		_ = connect.MoveOn(c.js.Conn())
	}
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

// confirm records the stream's answer for msgs[i] (m).
func (c *Committer) confirm(m *nats.Msg, i int, acks []Ack, a Ack, sent time.Time) {
	acks[i] = a
	c.lastSeen = max(c.lastSeen, a.Seq)
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		c.recent[id] = recentAck{seq: a.Seq, at: sent}
		c.fifo = append(c.fifo, recentID{id, sent})
	}
}

// expire forgets ids older than the duplicate trust, and the oldest beyond
// recentMax.
func (c *Committer) expire(now time.Time) {
	drop := 0
	for drop < len(c.fifo) && (len(c.fifo)-drop > recentMax || now.Sub(c.fifo[drop].at) >= c.cfg.DuplicateTrust) {
		e := c.fifo[drop]
		if r, ok := c.recent[e.id]; ok && r.at.Equal(e.at) {
			delete(c.recent, e.id)
		}
		drop++
	}
	// Appending past the capacity copies only what is left.
	c.fifo = c.fifo[drop:]
}
