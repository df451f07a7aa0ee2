package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	// queued is when it joined the sender's queue: Linger counts from it.
	queued time.Time
	// time is a valid record's event time (ms), 0 otherwise.
	time int64
	// done, if set, is told once whether the record was stored (Submit).
	done func(Ack)
}

// Ack is what became of one record given to Submit: stored in RAW at Seq
// (Duplicate: RAW held it already, Seq is the original's), or Err, when
// it was not confirmed stored (it may or may not be in RAW: send it
// again, and a copy that is there is a duplicate).
type Ack struct {
	Seq       uint64
	Duplicate bool
	Err       error
}

// newCommitter returns the sender's committer to RAW: a full store is
// retried like a restarting server, and a batch failing for long moves the
// connection to another server (docs/recovery.md). A one-replica RAW is
// written in chained runs (stream.CommitterConfig.ChainIfOneReplica): the
// server stages every atomic batch of a one-replica file stream in a
// synced store of its own, most of the cost of a small batch.
func newCommitter(js jetstream.JetStream, batchMax int, retryFor time.Duration, whileQuorum bool) *stream.Committer {
	cfg := stream.CommitterConfig{BatchMax: batchMax, RetryFor: retryFor, RetryStoreFull: true, MoveOn: true, SubjectLasts: true, ChainIfOneReplica: wire.Raw}
	if whileQuorum {
		cfg.WhileStream = wire.Raw
	}
	return stream.NewCommitter(js, cfg)
}

// commit stores items in RAW in order through c and returns RAW's answer
// for each confirmed one: all of them when err is nil, else a prefix.
func commit(ctx context.Context, c *stream.Committer, items []item) ([]stream.Ack, error) {
	msgs := make([]*nats.Msg, len(items))
	for i, it := range items {
		msgs[i] = it.msg
	}
	acks, err := c.Commit(ctx, msgs)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == stream.ErrCodeBatchDisabled {
		err = fmt.Errorf("%w: %w", ErrAtomicDisabled, apiErr)
	}
	return acks, err
}
