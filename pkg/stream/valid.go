package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// ValidRecord is one record held by VALID: a record of a frame, or a VALID
// message as the releases before frames wrote it (one event or heartbeat).
type ValidRecord struct {
	wire.FrameRecord
	// Subject, Seq, MsgID and Stored are those of the VALID message that
	// holds the record (the frame's, shared by its records).
	Subject string
	Seq     uint64
	MsgID   string
	Stored  time.Time
	// Source is the RAW partition the record came from (-1: not said, a
	// message from before frames).
	Source int
}

// ValidRecords returns the records of the VALID message m, in order.
func ValidRecords(m jetstream.Msg) ([]ValidRecord, error) {
	meta, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	h := m.Headers()
	base := ValidRecord{Subject: m.Subject(), Seq: meta.Sequence.Stream, MsgID: h.Get(jetstream.MsgIDHeader), Stored: meta.Timestamp, Source: -1}
	if h.Get(wire.HdrFrame) != "" {
		f, err := wire.DecodeFrame(m.Data())
		if err != nil {
			return nil, fmt.Errorf("stream: VALID sequence %d: %w", base.Seq, err)
		}
		out := make([]ValidRecord, len(f.Records))
		for i, r := range f.Records {
			out[i] = base
			out[i].FrameRecord, out[i].Source = r, f.Partition
		}
		return out, nil
	}
	r := base
	r.RawSeq, _ = strconv.ParseUint(h.Get(wire.HdrRawSeq), 10, 64)
	if hb := h.Get(wire.HdrHeartbeat); hb != "" {
		r.Kind = wire.FrameHeartbeat
		r.Time, err = strconv.ParseInt(hb, 10, 64)
	} else {
		r.Kind = wire.FrameOther
		if h.Get(wire.HdrKind) == wire.KindSubmission {
			r.Kind = wire.FrameSubmission
		}
		r.EventID = h.Get(wire.HdrEventID)
		r.Time, err = strconv.ParseInt(h.Get(wire.HdrTime), 10, 64)
		if r.EventID == "" {
			err = errors.New("no event id header")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream: VALID sequence %d is not a validator message: %w", base.Seq, err)
	}
	return []ValidRecord{r}, nil
}

// ReadValid calls fn with every record of stream name (a VALID stream) at
// the time of the call, in order (ReadAll, then ValidRecords).
func ReadValid(ctx context.Context, js jetstream.JetStream, name string, fn func(ValidRecord) error) error {
	return ReadAll(ctx, js, name, func(m jetstream.Msg) error {
		recs, err := ValidRecords(m)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	})
}
