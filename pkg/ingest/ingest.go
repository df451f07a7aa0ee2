// Package ingest publishes NDJSON records to the RAW stream: each record on
// its partition's subject, with ingested_at stamped when absent, a
// Nats-Msg-Id of event_id plus a content fingerprint (so retries are
// dropped by JetStream and conflicting duplicates still reach the
// validator), and in-stream progress heartbeats to every partition. Records
// and heartbeats form one ordered sequence that RAW stores in that order,
// also across broker restarts and leader changes (docs/spec.md §4): see
// stream.Committer.
package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Config configures an Ingester; zero fields take their defaults.
type Config struct {
	Partitions int
	// HotKeys spreads declared busy partition keys over several
	// partitions (window.Route); the validator must have the same.
	HotKeys   window.HotKeys
	Validator *contract.Validator
	// HeartbeatEvery sends a progress heartbeat to every partition after
	// this many records (default 1000). Counting records, not time, keeps a
	// bounded run deterministic.
	HeartbeatEvery int
	// HeartbeatInterval, if set, also sends one on this wall-clock period
	// while records keep arriving (live sources).
	HeartbeatInterval time.Duration
	// EndOfStream makes Close send the end-of-stream watermark, closing
	// every window (bounded runs).
	EndOfStream bool
	// SourceID names this Ingester as a source of RAW (docs/spec.md §3.1):
	// every record and heartbeat carries it (wire.HdrSource). Empty: the
	// legacy source, as RAW was written before sources had ids.
	SourceID string
	// MaxInFlight bounds the messages queued and not yet confirmed stored
	// (default 4096); Publish waits while it is reached.
	MaxInFlight int
	// BatchMax bounds the messages of one atomic batch (default
	// stream.AtomicBatchMax, the server's default max_batch_size; a
	// server configured lower is detected and followed).
	BatchMax int
	// Linger is how long a queued record may wait for its atomic batch to
	// fill before the sender sends a part of one (default 20ms; negative:
	// never waits), counted from when the record was queued. It delays a
	// trickle of records by at most that much beyond the commit before.
	// A one-replica RAW is written in chained runs instead, which wait as
	// RunWait says.
	Linger time.Duration
	// RunWait is how long a chained run may be held for more records
	// (default 2ms; negative: never), counted from when its first record
	// was queued, and only while fewer records are queued than the last
	// run carried: concurrent producers that each wait for their answer
	// (the front door's) come back together after each run, and one run
	// for all of them costs the server one read, one store pass and two
	// acks instead of one each. A lone producer's record waits at most
	// once, after a larger run; then its runs carry one record and go at
	// once.
	RunWait time.Duration
	// RetryFor bounds how long one batch (or one message) is retried
	// before ingest gives up with an *UnconfirmedError (default 30s).
	RetryFor time.Duration
	// WhileQuorum retries past RetryFor while RAW's leader answers (a
	// quorum is reachable): stream.CommitterConfig.WhileStream. A file's
	// ingest sets it; the front door, which answers 503 instead, does not.
	WhileQuorum bool
	// Now stamps ingested_at (default time.Now).
	Now func() time.Time
	// OnAck, if set, is called (from one goroutine, in publish order) with
	// each stored record's message id, stream sequence and whether it was
	// a duplicate (JetStream dropped it, or it repeats a record this
	// Ingester stored moments ago; seq is then the original's).
	OnAck func(msgID string, seq uint64, duplicate bool)
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.HeartbeatEvery <= 0 {
		c.HeartbeatEvery = config.Defaults().HeartbeatEvery
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4096
	}
	if c.BatchMax <= 0 {
		c.BatchMax = stream.AtomicBatchMax
	}
	if c.Linger == 0 {
		c.Linger = 20 * time.Millisecond
	}
	if c.RunWait == 0 {
		c.RunWait = DefaultRunWait
	}
	if c.RetryFor <= 0 {
		c.RetryFor = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// DefaultRunWait is Config.RunWait's default.
const DefaultRunWait = 2 * time.Millisecond

// Stats counts what an Ingester did.
type Stats struct {
	Records    int64 `json:"records"`
	Published  int64 `json:"published"`
	Duplicates int64 `json:"duplicates"`
	Invalid    int64 `json:"invalid"`
	Heartbeats int64 `json:"heartbeats"`
	// Commits counts the atomic batches or chained runs sent to RAW:
	// Published / Commits is the mean a commit carried.
	Commits int64 `json:"commits"`
}

// Ingester publishes records. Safe for concurrent use; the records of one
// caller are stored in the order of its calls.
type Ingester struct {
	js   jetstream.JetStream
	opts Config
	keep int // KeepBytes

	// mu guards the ordered sequence: what Publish and the heartbeats
	// append (queue), what the sender is storing (inflight), and the
	// state heartbeats are made from.
	mu        sync.Mutex
	line      int64
	progress  int64
	sinceBeat int
	dirty     bool
	records   int64
	queue     []item
	inflight  []item
	// wakeAt is the queue length the sender waits for while it holds a
	// chained run (0: it waits for any record).
	wakeAt int
	closed bool
	fail   error // the first *UnconfirmedError; nothing is sent after it

	// beatTag tells this source's heartbeats from another's with the same
	// progress and tag (their message ids would be JetStream duplicates).
	beatTag string

	kick   chan struct{} // the queue grew, or Close was called
	space  chan struct{} // the sender took items from the queue
	failed chan struct{} // closed when fail is set
	done   chan struct{} // closed when the sender has exited
	c      *stream.Committer

	statsMu sync.Mutex
	stats   Stats

	stop      context.CancelFunc // ends the sender and the heartbeat loop
	closeOnce sync.Once
}

// New returns an Ingester publishing to js. Call Close when done.
func New(js jetstream.JetStream, opts Config) *Ingester {
	opts = opts.withDefaults()
	var maxPayload int64
	if nc := js.Conn(); nc != nil {
		maxPayload = nc.MaxPayload()
	}
	in := &Ingester{js: js, opts: opts, keep: wire.KeepBytes(opts.Validator.Config().MaxSize, maxPayload),
		kick: make(chan struct{}, 1), space: make(chan struct{}, 1), failed: make(chan struct{}), done: make(chan struct{})}
	if opts.SourceID != "" {
		h := fnv.New64a()
		h.Write([]byte(opts.SourceID))
		in.beatTag = "/" + strconv.FormatUint(h.Sum64(), 36)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.stop = cancel
	in.c = newCommitter(js, opts.BatchMax, opts.RetryFor, opts.WhileQuorum)
	go in.send(ctx)
	if opts.HeartbeatInterval > 0 {
		go in.beatLoop(ctx)
	}
	return in
}

// send is the one goroutine that stores the queue in RAW, in order, until
// the Ingester is closed and the queue is empty, or a batch cannot be
// confirmed. Whatever is queued behind the failure is never sent, so
// nothing can be stored out of order after it.
func (in *Ingester) send(ctx context.Context) {
	defer close(in.done)
	c := in.c
	lastRun := 0 // messages of the last commit
	for {
		in.mu.Lock()
		for len(in.queue) == 0 && !in.closed {
			in.mu.Unlock()
			select {
			case <-in.kick:
			case <-ctx.Done():
				in.mu.Lock()
				if len(in.queue) > 0 {
					in.failLocked(ctx.Err(), 0)
				}
				in.mu.Unlock()
				return
			}
			in.mu.Lock()
		}
		if len(in.queue) == 0 {
			in.mu.Unlock()
			return
		}
		switch chained := c.Chained(); {
		case !chained && len(in.queue) < in.opts.BatchMax && !in.closed && in.opts.Linger > 0:
			in.wakeAt = in.opts.BatchMax
			in.linger(ctx, in.opts.Linger)
		case chained && len(in.queue) < lastRun && !in.closed && in.opts.RunWait > 0:
			in.wakeAt = lastRun
			in.linger(ctx, in.opts.RunWait)
		}
		n := min(len(in.queue), in.opts.BatchMax)
		lastRun = n
		batch := make([]item, n)
		copy(batch, in.queue)
		in.queue = append(in.queue[:0], in.queue[n:]...)
		in.inflight = batch
		in.mu.Unlock()
		signal(in.space)

		acks, err := commit(ctx, c, batch)
		in.statsMu.Lock()
		in.stats.Commits++
		in.statsMu.Unlock()
		in.report(batch, acks)
		in.mu.Lock()
		if err != nil {
			in.failLocked(err, len(acks))
			in.mu.Unlock()
			return
		}
		in.inflight = nil
		in.mu.Unlock()
	}
}

// chained reports whether the sender writes chained runs (known after the
// first commit).
func (in *Ingester) chained() bool { return in.c.Chained() }

// linger waits until d after the queue's first item was queued for the
// queue to reach in.wakeAt items (or Close), then clears wakeAt; in.mu is
// held, and released while it waits. Atomic batches wait for a full batch
// (Config.Linger): each costs the server a staging store and a sync,
// whatever its size. Chained runs wait for as many records as the last
// run carried (Config.RunWait). Counting from the oldest item, not from
// when the sender got to it, keeps the wait from adding to the commit
// before it: what queued up during that commit and is already older than
// d goes at once.
func (in *Ingester) linger(ctx context.Context, d time.Duration) {
	defer func() { in.wakeAt = 0 }()
	wait := time.Until(in.queue[0].queued.Add(d))
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(in.queue) < in.wakeAt && !in.closed {
		in.mu.Unlock()
		select {
		case <-t.C:
			in.mu.Lock()
			return
		case <-ctx.Done():
			in.mu.Lock()
			return
		case <-in.kick:
		}
		in.mu.Lock()
	}
}

// report counts the duplicates among the confirmed head of items (one ack
// each) and calls OnAck for their records, in order.
func (in *Ingester) report(items []item, acks []stream.Ack) {
	dups := 0
	for i, a := range acks {
		if a.Duplicate {
			dups++
		}
		if it := items[i]; in.opts.OnAck != nil && it.line > 0 {
			in.opts.OnAck(it.id, a.Seq, a.Duplicate)
		}
		if it := items[i]; it.done != nil {
			it.done(Ack{Seq: a.Seq, Duplicate: a.Duplicate})
		}
	}
	in.statsMu.Lock()
	in.stats.Duplicates += int64(dups)
	in.statsMu.Unlock()
}

// failLocked records the first failure: the first record not confirmed is
// the first one from inflight[stored:] on, then the queue. in.mu is held.
func (in *Ingester) failLocked(err error, stored int) {
	if in.fail != nil {
		return
	}
	e := &UnconfirmedError{Err: err}
	for _, l := range [][]item{in.inflight[min(stored, len(in.inflight)):], in.queue} {
		for _, it := range l {
			if it.line > 0 && e.Line == 0 {
				e.Line, e.EventID = it.line, eventIDOf(it.msg.Data)
			}
			if it.done != nil {
				it.done(Ack{Err: e})
			}
		}
	}
	in.fail = e
	close(in.failed)
}

// signal wakes one waiter on c, if there is none waiting already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (in *Ingester) beatLoop(ctx context.Context) {
	t := time.NewTicker(in.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			in.mu.Lock()
			if in.dirty && !in.closed && in.fail == nil {
				in.heartbeatLocked(in.progress, "t"+strconv.FormatInt(time.Now().UnixNano(), 36), false)
			}
			in.mu.Unlock()
			signal(in.kick)
		}
	}
}

// Submit queues one record (a JSON object, or what a producer sent as one)
// to be stored in RAW after every record queued before it, as Publish
// does, and calls done once with what became of it, from the sender's
// goroutine (done must not block). It returns the record's event id, when
// one could be read, and its verdict as far as the contract needs no state
// (nil: it passes). It does not wait while Config.MaxInFlight records are
// queued: it returns ErrBusy, the record not queued; nor after a failure
// (*UnconfirmedError) or Close (ErrClosed). A blank record is ErrBlank.
func (in *Ingester) Submit(rec []byte, done func(Ack)) (string, *contract.RejectError, error) {
	if len(bytes.TrimSpace(rec)) == 0 {
		return "", nil, ErrBlank
	}
	it, eventID, rej := in.buildChecked(rec)
	it.done = done
	in.mu.Lock()
	if err := in.usableLocked(); err != nil {
		in.mu.Unlock()
		return eventID, rej, err
	}
	if len(in.queue) >= in.opts.MaxInFlight {
		in.mu.Unlock()
		return eventID, rej, ErrBusy
	}
	wake := in.queueLocked(it, rej == nil)
	in.mu.Unlock()
	if wake {
		signal(in.kick)
	}
	return eventID, rej, nil
}

// Publish queues one NDJSON record (without its newline) to be stored in
// RAW after every record published before it. It returns an error only
// when ingest cannot go on: an earlier record could not be confirmed
// stored (*UnconfirmedError), ctx is done (before the record is queued, or
// while the queue is full; the record is then not queued and its line not
// counted), or the Ingester is closed (ErrClosed). Close says whether the last records were
// stored. An invalid record is published too, so the validator rejects it
// with its reason. A line that is blank (only white space, Unicode
// included) is skipped, as the batch pass skips it, but counts as a line;
// otherwise only JSON white space is trimmed, so that the record the
// validator judges is the one the batch pass judges. A record longer than
// wire.KeepBytes is published as its first wire.KeepBytes bytes with wire.HdrOrigSize.
func (in *Ingester) Publish(ctx context.Context, line []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ingest: publish: %w", err)
	}
	if len(bytes.TrimSpace(line)) == 0 {
		in.mu.Lock()
		defer in.mu.Unlock()
		if err := in.usableLocked(); err != nil {
			return err
		}
		in.line++
		return nil
	}
	it, _, valid := in.build(line)
	in.mu.Lock()
	for {
		if err := in.usableLocked(); err != nil {
			in.mu.Unlock()
			return err
		}
		if len(in.queue) < in.opts.MaxInFlight {
			break
		}
		in.mu.Unlock()
		select {
		case <-in.space:
		case <-in.failed:
		case <-ctx.Done():
			return fmt.Errorf("ingest: publish: %w", ctx.Err())
		}
		in.mu.Lock()
	}
	wake := in.queueLocked(it, valid)
	in.mu.Unlock()
	if wake {
		signal(in.kick)
	}
	return nil
}

// queueLocked appends a record's item, counts it, and queues a heartbeat
// after every HeartbeatEvery records. It reports whether the sender is to
// be woken: it waits for any record, or for as many as are now queued
// (wakeAt). in.mu is held.
func (in *Ingester) queueLocked(it item, valid bool) (wake bool) {
	in.line++
	it.line = in.line
	it.queued = time.Now()
	in.queue = append(in.queue, it)
	in.records++
	in.statsMu.Lock()
	in.stats.Records++
	in.stats.Published++
	if !valid {
		in.stats.Invalid++
	}
	in.statsMu.Unlock()
	if valid {
		in.dirty = true
		if it.time > in.progress {
			in.progress = it.time
		}
	}
	in.sinceBeat++
	if in.sinceBeat >= in.opts.HeartbeatEvery {
		in.heartbeatLocked(in.progress, "n"+strconv.FormatInt(in.records, 10), false)
	}
	return in.wakeAt == 0 || len(in.queue) >= in.wakeAt
}

// usableLocked returns why nothing more may be published, if anything.
// in.mu is held.
func (in *Ingester) usableLocked() error {
	if in.fail != nil {
		return in.fail
	}
	if in.closed {
		return ErrClosed
	}
	return nil
}

// build makes the RAW message of a record; valid says whether the
// contract accepts it (so it moves the source's progress).
func (in *Ingester) build(line []byte) (it item, eventID string, valid bool) {
	it, eventID, rej := in.buildChecked(line)
	return it, eventID, rej == nil
}

// buildChecked makes the RAW message of a record and returns its event
// id, when one could be read, and the contract's rejection of it, nil
// when it passes.
func (in *Ingester) buildChecked(line []byte) (it item, eventID string, rej *contract.RejectError) {
	line = bytes.Trim(line, " \t\r\n")
	now := in.opts.Now().UTC()
	rec := line
	cut := len(line) > in.keep
	if cut {
		rec = line[:in.keep]
	} else if stamped, ok := contract.StampIngestedAt(line, now); ok {
		rec = stamped
	}
	var ev contract.Event
	if cut { // a cut record is too_large: the validator says so
		rej = contract.Reject(contract.ReasonTooLarge, contract.PeekEventID(rec), "%d bytes", len(line))
	} else if e, err := in.opts.Validator.Validate(rec, now); err != nil {
		var ok bool
		if rej, ok = contract.AsReject(err); !ok {
			rej = contract.Reject(contract.ReasonMalformedJSON, contract.PeekEventID(rec), "%v", err)
		}
	} else {
		ev = e
	}
	var subject, msgID string
	if rej == nil {
		subject = wire.For("").Subject(wire.Raw, window.Route(ev.PartitionKey, ev.EventID, in.opts.Partitions, in.opts.HotKeys))
		msgID = ev.EventID + ":" + strconv.FormatUint(ev.Fingerprint, 16)
		it.time, eventID = ev.OccurredAt.UnixMilli(), ev.EventID
	} else {
		sum := sha256.Sum256(line)
		msgID = "x:" + hex.EncodeToString(sum[:12])
		subject = wire.For("").Subject(wire.Raw, int(sum[0])%in.opts.Partitions)
		eventID = rej.EventID
	}
	m := stream.NewMsg(subject, msgID, rec)
	if in.opts.SourceID != "" {
		m.Header.Set(wire.HdrSource, in.opts.SourceID)
	}
	if cut {
		m.Header.Set(wire.HdrOrigSize, strconv.Itoa(len(line)))
	}
	it.msg, it.id = m, msgID
	return it, eventID, rej
}

// heartbeatLocked queues progress to every partition, behind the records
// queued so far; leave marks it the source's last (wire.HdrLeave). tag
// makes the message ids of distinct heartbeats distinct and of a re-sent
// one equal. Nothing is sent for a progress below 0, or of 0 unless it
// leaves: a source that never sent a valid record is live nowhere. in.mu
// is held.
func (in *Ingester) heartbeatLocked(progress int64, tag string, leave bool) {
	in.sinceBeat = 0
	in.dirty = false
	if progress < 0 || (progress == 0 && !leave) {
		return
	}
	for p := 0; p < in.opts.Partitions; p++ {
		// '/' is outside the event id alphabet: no record's id (event_id:
		// fingerprint) can equal a heartbeat's.
		id := "hb/" + strconv.FormatInt(progress, 10) + "/" + tag + "/" + strconv.Itoa(p) + in.beatTag
		m := stream.NewMsg(wire.For("").Subject(wire.Raw, p), id, nil)
		m.Header.Set(wire.HdrHeartbeat, strconv.FormatInt(progress, 10))
		if in.opts.SourceID != "" {
			m.Header.Set(wire.HdrSource, in.opts.SourceID)
		}
		if leave {
			m.Header.Set(wire.HdrLeave, "1")
		}
		in.queue = append(in.queue, item{msg: m, id: id, queued: time.Now()})
	}
	in.statsMu.Lock()
	in.stats.Heartbeats++
	in.stats.Published += int64(in.opts.Partitions)
	in.statsMu.Unlock()
}

// Heartbeat queues the current progress to every partition now, behind the
// records published so far. It returns ctx's error if ctx has ended, else
// the Ingester's failure or ErrClosed, if any; Close says whether it was
// stored.
func (in *Ingester) Heartbeat(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ingest: heartbeat: %w", err)
	}
	in.mu.Lock()
	if err := in.usableLocked(); err != nil {
		in.mu.Unlock()
		return err
	}
	in.heartbeatLocked(in.progress, "m"+strconv.FormatInt(in.records, 10), false)
	in.mu.Unlock()
	signal(in.kick)
	return nil
}

// Stats returns the counts so far.
func (in *Ingester) Stats() Stats {
	in.statsMu.Lock()
	defer in.statsMu.Unlock()
	return in.stats
}

// Close queues the last heartbeat, which leaves (docs/spec.md §3.1): the
// end-of-stream watermark if configured, else the progress when a valid
// record came since the previous heartbeat, else 0 (it only leaves; a
// heartbeat never lowers a watermark). None when no valid record was ever
// sent. It waits until everything queued is confirmed stored in RAW,
// and returns nil only then. Otherwise it returns an *UnconfirmedError
// naming the first record not confirmed (also when ctx ends first; the
// sender is then stopped). Safe to call twice: a second call returns nil.
func (in *Ingester) Close(ctx context.Context) error {
	var err error
	in.closeOnce.Do(func() {
		in.mu.Lock()
		if in.fail == nil && !in.closed {
			switch {
			case in.opts.EndOfStream:
				in.heartbeatLocked(window.EndOfStream, "eos", true)
			case in.dirty:
				in.heartbeatLocked(in.progress, "c"+strconv.FormatInt(in.records, 10), true)
			case in.progress > 0:
				in.heartbeatLocked(0, "c"+strconv.FormatInt(in.records, 10), true)
			}
		}
		in.closed = true
		in.mu.Unlock()
		signal(in.kick)
		select {
		case <-in.done:
		case <-ctx.Done():
			in.stop()
			<-in.done
		}
		in.stop()
		in.mu.Lock()
		if in.fail != nil {
			err = in.fail
		}
		in.mu.Unlock()
	})
	return err
}
