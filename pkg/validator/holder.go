package validator

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/window"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// holderReadTimeout bounds the read of one counted copy from RAW: the
// header it feeds is for explain, and never holds a partition up for long.
const holderReadTimeout = 5 * time.Second

// holderWindows returns, for each conflicting claim of partition p, the
// wire.HdrWindow value of its REJECTED message: the window of the copy
// that holds the id (read from RAW by the sequence its claim records),
// wire.WindowNone when that copy is of a type that never counts, or ""
// when it cannot be read (no sequence in the claim, gone from RAW, RAW
// unreadable: logged). It errors only when Redis does. Conflicts are rare,
// so this costs one Redis round trip and one RAW read per conflict.
func (s *Service) holderWindows(ctx context.Context, p int, claims []ledger.Claim) ([]string, error) {
	out := make([]string, len(claims))
	if len(claims) == 0 {
		return out, nil
	}
	holders, err := s.store.ClaimHolders(ctx, claims)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, holderReadTimeout)
	defer cancel()
	var raw jetstream.Stream
	for i, seq := range holders {
		if seq == 0 {
			continue
		}
		if raw == nil {
			if raw, err = s.js.Stream(rctx, s.cfg.Names.Stream(wire.Raw)); err != nil {
				s.cfg.Logger.Warn("cannot read RAW for the windows of conflicting copies; their REJECTED rows name none",
					"partition", p, "err", err)
				return out, nil
			}
		}
		m, err := raw.GetMsg(rctx, seq)
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				s.cfg.Logger.Warn("cannot read the counted copy of a conflicting id from RAW; its REJECTED row names no window",
					"partition", p, "event_id", claims[i].EventID, "raw_seq", seq, "err", err)
			}
			continue
		}
		it, rej := s.validateOne(m.Data, m.Header, m.Time)
		switch {
		case rej != nil:
		case it.rec.Kind == wire.FrameSubmission:
			out[i] = window.ID(it.rec.Time)
		default:
			out[i] = wire.WindowNone
		}
	}
	return out, nil
}
