package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/service"
	"github.com/receiptflow/receiptflow/pkg/wire"
)

// consumerRef names one durable consumer a service owns.
type consumerRef = service.Consumer

// role is what the daemon knows of a service beyond its Runner: the
// consumers it owns and the partitions whose state it reads.
type role struct {
	name      string
	consumers []consumerRef
	// state: partitions whose checkpoint and window index are sampled;
	// perPartition reports them one by one (windower) or summed (publisher).
	state        []int
	perPartition bool
	bucket       string
}

// roleOf returns the role of service name over the partitions owned.
func roleOf(name string, n wire.Names, owned []int, partitions int) role {
	r := role{name: name, consumers: service.Consumers(name, n, owned)}
	switch name {
	case service.Windower:
		r.state, r.perPartition = owned, true
	case service.Publisher:
		for p := 0; p < partitions; p++ {
			r.state = append(r.state, p)
		}
		r.bucket = n.Bucket()
	}
	return r
}

// waitTopology waits until the stream the service consumes (and its
// bucket) exists, so services started before the set-up job do not crash
// in a loop. It asks only what the service may ask anyway: its own
// consumer (a missing stream answers "stream not found") and its bucket.
// A server that is away is waited for too; a refusal ends the wait.
func (r role) waitTopology(ctx context.Context, js jetstream.JetStream, w waiter, refused *refusals) error {
	if len(r.consumers) == 0 {
		return nil
	}
	first := r.consumers[0]
	return w.until(ctx, "the streams and buckets (run the set-up job: --ensure-only)", first.Stream+" "+r.bucket, func(ctx context.Context) error {
		lookCtx, cancel := refused.context(ctx, 10*time.Second)
		defer cancel()
		_, err := js.Consumer(lookCtx, first.Stream, first.Durable)
		if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			err = nil
			if r.bucket != "" {
				_, err = js.KeyValue(lookCtx, r.bucket)
			}
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
			return fmt.Errorf("%w: %w", connect.ErrNotYet, err)
		}
		return refused.or(fmt.Errorf("look up %s/%s: %w", first.Stream, first.Durable, err))
	})
}
