package testenv

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips counts the round trips a go-redis client makes once added to
// it (AddHook): one per command, one per pipeline or transaction.
type RoundTrips struct{ n atomic.Int64 }

// CountRoundTrips adds a RoundTrips to rdb and returns it.
func CountRoundTrips(rdb redis.UniversalClient) *RoundTrips {
	r := &RoundTrips{}
	rdb.AddHook(r)
	return r
}

// Take returns the round trips since the last Take.
func (r *RoundTrips) Take() int64 { return r.n.Swap(0) }

// DialHook is redis.Hook's: dials are not counted.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's: one command, one round trip.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook is redis.Hook's: one pipeline, one round trip.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*RoundTrips)(nil)
