// Package ingest publishes NDJSON records to the RAW stream: each record on
// its partition's subject, with ingested_at stamped when absent, a
// Nats-Msg-Id of event_id plus a content fingerprint (so retries are
// dropped by JetStream and conflicting duplicates still reach the
// validator), asynchronous publishes with a bounded number in flight, and
// in-stream progress heartbeats to every partition.
package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// HdrOrigSize is set on a message whose record was cut to a bounded prefix
// (KeepBytes): the record's full size in bytes. Only records that are
// too_large anyway are cut; the validator reports them with this size.
const HdrOrigSize = "Rf-Orig-Size"

// KeepBytes is the longest record ingest publishes whole, and the most of a
// record the validator copies to REJECTED: four times the contract's
// maxSize, and never so much that the message (with room for its headers)
// could exceed the server's maxPayload (when known, > 0). A longer record is
// too_large anyway; publishing it whole would fail on a line of megabytes
// (or on its REJECTED copy) and stop the whole ingest or its partition.
func KeepBytes(maxSize int, maxPayload int64) int {
	keep := 4 * maxSize
	if room := int(maxPayload) - 8<<10; maxPayload > 0 && room > maxSize && room < keep {
		keep = room
	}
	return keep
}

// Options configure an Ingester.
type Options struct {
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
	// MaxInFlight bounds unacknowledged publishes (default 4096).
	MaxInFlight int
	// Now stamps ingested_at (default time.Now).
	Now func() time.Time
	// OnAck, if set, is called (from one goroutine, in publish order) with
	// each stored record's message id, stream sequence and whether
	// JetStream dropped it as a duplicate (seq is then the original's).
	OnAck func(msgID string, seq uint64, duplicate bool)
}

// Stats counts what an Ingester did.
type Stats struct {
	Records    int64 `json:"records"`
	Published  int64 `json:"published"`
	Duplicates int64 `json:"duplicates"`
	Invalid    int64 `json:"invalid"`
	Heartbeats int64 `json:"heartbeats"`
}

// Ingester publishes records. Safe for concurrent use.
type Ingester struct {
	js   jetstream.JetStream
	opts Options

	mu        sync.Mutex
	progress  int64
	sinceBeat int
	dirty     bool
	stats     Stats
	acks      chan jetstream.PubAckFuture
	dups      atomic.Int64 // duplicate acks, counted by collect
	errMu     sync.Mutex   // guards ackErr; never held with mu by collect
	ackErr    error
	ackDone   chan struct{}
	stop      context.CancelFunc
	keep      int // KeepBytes
	closed    bool
	closeOnce sync.Once
}

// New returns an Ingester publishing to js. Call Close when done.
func New(js jetstream.JetStream, opts Options) *Ingester {
	if opts.HeartbeatEvery <= 0 {
		opts.HeartbeatEvery = 1000
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var maxPayload int64
	if nc := js.Conn(); nc != nil {
		maxPayload = nc.MaxPayload()
	}
	in := &Ingester{js: js, opts: opts, acks: make(chan jetstream.PubAckFuture, opts.MaxInFlight), ackDone: make(chan struct{}),
		keep: KeepBytes(opts.Validator.Options().MaxSize, maxPayload)}
	go in.collect()
	ctx, cancel := context.WithCancel(context.Background())
	in.stop = cancel
	if opts.HeartbeatInterval > 0 {
		go in.beatLoop(ctx)
	}
	return in
}

// collect waits for acks in publish order; the channel's capacity is what
// bounds the publishes in flight.
func (in *Ingester) collect() {
	defer close(in.ackDone)
	for f := range in.acks {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				in.dups.Add(1)
			}
			if in.opts.OnAck != nil && f.Msg().Header.Get(stream.HdrHeartbeat) == "" {
				in.opts.OnAck(f.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence, ack.Duplicate)
			}
		case err := <-f.Err():
			// Lost in a disconnect, a server restart or a timeout: publish
			// it again, synchronously (backpressure), under the same
			// Nats-Msg-Id, so a copy that did get stored is dropped.
			ack, err := in.retry(f.Msg(), err)
			if err != nil {
				in.errMu.Lock()
				if in.ackErr == nil {
					in.ackErr = fmt.Errorf("ingest: publish %s: %w", f.Msg().Subject, err)
				}
				in.errMu.Unlock()
				continue
			}
			if ack.Duplicate {
				in.dups.Add(1)
			}
			if in.opts.OnAck != nil && f.Msg().Header.Get(stream.HdrHeartbeat) == "" {
				in.opts.OnAck(f.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence, ack.Duplicate)
			}
		}
	}
}

// retryFor bounds how long a failed publish is retried.
const retryFor = 30 * time.Second

// retry publishes m synchronously until JetStream stores it or retryFor
// has passed since the first failure.
func (in *Ingester) retry(m *nats.Msg, first error) (*jetstream.PubAck, error) {
	deadline := time.Now().Add(retryFor)
	err := first
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var ack *jetstream.PubAck
		ack, err = in.js.PublishMsg(ctx, m)
		cancel()
		if err == nil {
			return ack, nil
		}
	}
	return nil, fmt.Errorf("gave up after %s: %w", retryFor, err)
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
			if in.dirty {
				_ = in.heartbeatLocked(in.progress, "t"+strconv.FormatInt(time.Now().UnixNano(), 36))
			}
			in.mu.Unlock()
		}
	}
}

// Publish publishes one NDJSON record (without its newline). It returns an
// error only when publishing failed; an invalid record is published too,
// so the validator rejects it with its reason. A line that is blank (only
// white space, Unicode included) is skipped, as the batch pass skips it;
// otherwise only JSON white space is trimmed, so that the record the
// validator judges is the one the batch pass judges. A record longer than
// KeepBytes is published as its first KeepBytes bytes with HdrOrigSize.
func (in *Ingester) Publish(ctx context.Context, line []byte) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	line = bytes.Trim(line, " \t\r\n")
	now := in.opts.Now().UTC()
	rec := line
	cut := len(line) > in.keep
	if cut {
		rec = line[:in.keep]
	} else if stamped, ok := contract.StampIngestedAt(line, now); ok {
		rec = stamped
	}
	var subject, msgID string
	var ev contract.Event
	valid := false
	if !cut { // a cut record is too_large: the validator says so
		var err error
		ev, err = in.opts.Validator.Validate(rec, now)
		valid = err == nil
	}
	if valid {
		subject = stream.For("").Subject(stream.Raw, window.Route(ev.PartitionKey, ev.EventID, in.opts.Partitions, in.opts.HotKeys))
		msgID = ev.EventID + ":" + strconv.FormatUint(ev.Fingerprint, 16)
	} else {
		sum := sha256.Sum256(line)
		msgID = "x:" + hex.EncodeToString(sum[:12])
		subject = stream.For("").Subject(stream.Raw, int(sum[0])%in.opts.Partitions)
	}
	m := stream.NewMsg(subject, msgID, rec)
	if cut {
		m.Header.Set(HdrOrigSize, strconv.Itoa(len(line)))
	}
	if err := in.firstAckErr(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.publishLocked(m); err != nil {
		return err
	}
	in.stats.Records++
	if valid {
		in.dirty = true
		if t := ev.OccurredAt.UnixMilli(); t > in.progress {
			in.progress = t
		}
	} else {
		in.stats.Invalid++
	}
	in.sinceBeat++
	if in.sinceBeat >= in.opts.HeartbeatEvery {
		return in.heartbeatLocked(in.progress, "n"+strconv.FormatInt(in.stats.Records, 10))
	}
	return nil
}

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("ingest: closed")

func (in *Ingester) publishLocked(m *nats.Msg) error {
	if in.closed {
		return ErrClosed
	}
	f, err := in.js.PublishMsgAsync(m)
	for deadline := time.Now().Add(retryFor); err != nil && time.Now().Before(deadline); {
		// Not even sent (e.g. the connection is down): wait and retry.
		time.Sleep(100 * time.Millisecond)
		f, err = in.js.PublishMsgAsync(m)
	}
	if err != nil {
		return fmt.Errorf("ingest: publish %s: %w", m.Subject, err)
	}
	in.acks <- f
	in.stats.Published++
	return nil
}

// heartbeatLocked sends progress to every partition. tag makes the message
// ids of distinct heartbeats distinct and of a re-sent one equal.
func (in *Ingester) heartbeatLocked(progress int64, tag string) error {
	in.sinceBeat = 0
	in.dirty = false
	if progress <= 0 {
		return nil
	}
	for p := 0; p < in.opts.Partitions; p++ {
		// '/' is outside the event id alphabet: no record's id (event_id:
		// fingerprint) can equal a heartbeat's.
		m := stream.NewMsg(stream.For("").Subject(stream.Raw, p),
			"hb/"+strconv.FormatInt(progress, 10)+"/"+tag+"/"+strconv.Itoa(p), nil)
		m.Header.Set(stream.HdrHeartbeat, strconv.FormatInt(progress, 10))
		if err := in.publishLocked(m); err != nil {
			return err
		}
	}
	in.stats.Heartbeats++
	return nil
}

// Heartbeat sends the current progress to every partition now.
func (in *Ingester) Heartbeat(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.heartbeatLocked(in.progress, "m"+strconv.FormatInt(in.stats.Records, 10))
}

func (in *Ingester) firstAckErr() error {
	in.errMu.Lock()
	defer in.errMu.Unlock()
	return in.ackErr
}

// Stats returns the counts so far.
func (in *Ingester) Stats() Stats {
	in.mu.Lock()
	st := in.stats
	in.mu.Unlock()
	st.Duplicates = in.dups.Load()
	return st
}

// Close sends the last heartbeat (the end-of-stream watermark if
// configured), waits for every publish to be stored and returns the first
// publish error. Safe to call twice.
func (in *Ingester) Close(ctx context.Context) error {
	var err error
	in.closeOnce.Do(func() {
		in.stop()
		in.mu.Lock()
		if in.opts.EndOfStream {
			err = in.heartbeatLocked(window.EndOfStream, "eos")
		} else if in.dirty {
			err = in.heartbeatLocked(in.progress, "c"+strconv.FormatInt(in.stats.Records, 10))
		}
		in.closed = true
		close(in.acks)
		in.mu.Unlock()
		select {
		case <-in.ackDone:
		case <-ctx.Done():
			err = errors.Join(err, ctx.Err())
		}
		err = errors.Join(err, in.firstAckErr())
	})
	return err
}

// File publishes every line of r, then closes the Ingester. progress, if
// set, is called about every 10,000 records.
func File(ctx context.Context, in *Ingester, r io.Reader, progress func(Stats)) (Stats, error) {
	return FileAtRate(ctx, in, r, 0, progress)
}

// FileAtRate is File paced to at most rate records per second (0: as fast
// as JetStream takes them).
func FileAtRate(ctx context.Context, in *Ingester, r io.Reader, rate int, progress func(Stats)) (Stats, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	began := time.Now()
	var sent int
	for {
		if rate > 0 {
			sent++
			if ahead := time.Duration(sent)*time.Second/time.Duration(rate) - time.Since(began); ahead > 5*time.Millisecond {
				select {
				case <-ctx.Done():
				case <-time.After(ahead):
				}
			}
		}
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if perr := in.Publish(ctx, line); perr != nil {
				return in.Stats(), errors.Join(perr, in.Close(ctx))
			}
			if progress != nil && in.Stats().Records%10000 == 0 {
				progress(in.Stats())
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return in.Stats(), errors.Join(fmt.Errorf("ingest: read: %w", err), in.Close(ctx))
		}
		if ctx.Err() != nil {
			return in.Stats(), errors.Join(ctx.Err(), in.Close(ctx))
		}
	}
	err := in.Close(ctx)
	return in.Stats(), err
}
