package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/stream"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// Record is one message of a raw snapshot as the batch pass reads it, in
// RAW order: an event record or a source heartbeat.
type Record struct {
	// Seq is the RAW stream sequence (for a file, the record number).
	Seq uint64
	// Line is the line in a file (0 for a RAW stream).
	Line int
	// Received is the broker's receive time of the message (its JetStream
	// timestamp); the contract check judges future timestamps against it.
	Received time.Time
	// Partition is the partition of the RAW subject; it places a
	// heartbeat (an event record is placed by its partition key).
	Partition int
	// Heartbeat marks a source progress heartbeat, Progress its value (ms).
	Heartbeat bool
	Progress  int64
	// Source is the id of the source that wrote the message (header
	// wire.HdrSource; wire.SourceLegacy when absent), Leave marks its
	// last heartbeat (wire.HdrLeave): docs/spec.md §3.1.
	Source string
	Leave  bool
	// Data is the record as stored; Size, when larger than len(Data), is
	// the full size of a record ingest cut (too_large).
	Data []byte
	Size int
}

// RecordOf converts a RAW stream message into a Record. It fails when the
// message has no JetStream metadata or a malformed heartbeat or subject.
func RecordOf(m jetstream.Msg) (Record, error) {
	meta, err := m.Metadata()
	if err != nil {
		return Record{}, fmt.Errorf("reconcile: RAW metadata: %w", err)
	}
	r := Record{Seq: meta.Sequence.Stream, Received: meta.Timestamp.UTC(), Data: m.Data()}
	subj := m.Subject()
	p, err := strconv.Atoi(subj[strings.LastIndexByte(subj, '.')+1:])
	if err != nil {
		return Record{}, fmt.Errorf("reconcile: RAW seq %d: subject %q has no partition", r.Seq, subj)
	}
	r.Partition = p
	h := m.Headers()
	r.Source = h.Get(wire.HdrSource)
	if hb := h.Get(wire.HdrHeartbeat); hb != "" {
		v, err := strconv.ParseInt(hb, 10, 64)
		if err != nil {
			// The validator rejects it (invalid_field); it moves nothing.
			return Record{Seq: r.Seq, Received: r.Received, Partition: p, Source: r.Source, Data: []byte{}}, nil
		}
		r.Heartbeat, r.Progress = true, v
		r.Leave = h.Get(wire.HdrLeave) == "1"
		return r, nil
	}
	if s := h.Get(wire.HdrOrigSize); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > len(r.Data) {
			r.Size = n
		}
	}
	return r, nil
}

// CountRaw runs the batch pass over RAW stream name as stored now, read in
// order with its heartbeats; it returns the batch and the last RAW sequence
// read (0 for an empty stream).
func CountRaw(ctx context.Context, js jetstream.JetStream, name string, opts Config) (*Batch, uint64, error) {
	b, err := NewBatch(opts)
	if err != nil {
		return nil, 0, err
	}
	var last uint64
	err = stream.ReadAll(ctx, js, name, func(m jetstream.Msg) error {
		r, err := RecordOf(m)
		if err != nil {
			return err
		}
		last = r.Seq
		return b.AddRecord(r)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile: read %s: %w", name, err)
	}
	return b, last, nil
}
